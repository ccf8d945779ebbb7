package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// Deleting records of finished work: DELETE /api/v1/projects/{project}/runs/{run}
// (gpud delete), the runs part of DELETE /api/v1/projects/{project}
// (gpud project delete), and what a deleted fleet does with finished jobs
// that still name its hosts.
//
// Who may delete a run: any member of its project, as for stopping it
// (handleStopRun): a run's record is the project's, not its submitter's.
// One exception: a service whose keys would go with it (a key is a
// credential its owner handed to clients) is deleted only by its
// submitter or a manager, the people who may revoke those keys
// (mayManageKeys).

// handleDeleteRun removes a finished run's record, its jobs' records and
// their logs, and, when no other record of the run's name is left, its
// service keys (else they would open a later run of the same name,
// perhaps another user's). A job record is what binds a host to the run
// (store index byInstance): once it is gone, the host is free of it, and
// its fleet can be deleted.
func (s *runsAPI) handleDeleteRun(w http.ResponseWriter, r *http.Request) error {
	project, c, have, err := s.authorizeRole(r, api.RoleUser)
	if err != nil {
		return err
	}
	run, err := s.findRun(project, r.PathValue("run"))
	if err != nil {
		return err
	}
	if !finishedRun(run.Status) {
		return conflict("run %q is %s, not finished: stop it first (gpud stop %s), then delete it", run.Name, run.Status, run.Name)
	}
	serviceKeysMu.Lock()
	defer serviceKeysMu.Unlock()
	keys, err := s.lastRunKeyMutations(r.Context(), project, run)
	if err != nil {
		return err
	}
	if len(keys) > 0 && roleRank(have) < roleRank(api.RoleManager) && run.User != c.name {
		return forbidden("run %q is a service with keys, which deleting it revokes: only its submitter (%s) or a manager of the project may delete it", run.Name, run.User)
	}
	muts, jobs := runDeletion(s.store, run)
	muts = append(muts, keys...)
	muts = append(muts, s.event(project, store.KindRun, run.ID, "deleted", "deleted by "+c.name))
	if _, err := s.store.Apply(r.Context(), muts...); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return conflict("run %q changed meanwhile; try again", run.Name)
		}
		return err
	}
	s.removeJobLogs(run.ID, jobs)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// runDeletion is the mutations that delete run and its jobs, and the
// jobs' ids (whose logs go after the commit).
func runDeletion(st *store.Store, run store.Record) ([]store.Mutation, []string) {
	muts := []store.Mutation{store.Delete(store.KindRun, run.ID)}
	var jobs []string
	for _, j := range st.Jobs().ByRun(run.ID) {
		muts = append(muts, store.Delete(store.KindJob, j.ID))
		jobs = append(jobs, j.ID)
	}
	return muts, jobs
}

// removeJobLogs removes the logs of a deleted run's jobs. The records are
// gone already; a log left behind is only disk space, said in the log
// rather than failing a delete that happened.
func (s *Server) removeJobLogs(run string, jobs []string) {
	for _, j := range jobs {
		if err := s.store.Logs().Remove(j); err != nil {
			s.log.Warn().Err(err).Str("run", run).Str("job", j).Msg("delete run: remove job log")
		}
	}
}

// lastRunKeyMutations deletes the service keys of run's name when run is
// the last record of that name in project; nil otherwise, or when it has
// none. The caller holds serviceKeysMu.
func (s *Server) lastRunKeyMutations(ctx context.Context, project string, run store.Record) ([]store.Mutation, error) {
	for _, other := range s.store.Runs().ByProject(project) {
		if other.Name == run.Name && other.ID != run.ID {
			return nil, nil // the keys stay the name's, for that run
		}
	}
	return s.serviceKeyMutations(ctx, serviceKeyNamesDir(project, run.Name))
}

// serviceKeyMutations deletes every key listed under the names directory
// dir (recursively): the name entries, and each key's entry and last use.
func (s *Server) serviceKeyMutations(ctx context.Context, dir string) ([]store.Mutation, error) {
	names, err := s.store.KV().List(ctx, dir, true)
	if errors.Is(err, fs.ErrNotExist) || len(names) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var muts []store.Mutation
	for _, k := range names {
		hash, err := s.store.KV().Load(ctx, k)
		if err != nil {
			continue // a directory, or revoked meanwhile
		}
		muts = append(muts, store.KVDelete(serviceKeyHashKey(string(hash))), store.KVDelete(serviceKeyUsedKey(string(hash))))
	}
	if len(muts) == 0 {
		return nil, nil
	}
	return append(muts, store.KVDelete(dir)), nil
}

// handleDeleteProject deletes a project that holds nothing live: it
// refuses, naming each, while it has runs that are not finished, fleets
// (hosts and their agents), volumes (data on hosts) or backends (plugins
// and their credentials), each of which has its own delete that cleans up
// what it holds. Otherwise its finished runs (with their jobs, logs and
// service keys), members, queues, secrets, gateways and registration
// tokens go with it, in one commit.
func (s *accountsAPI) handleDeleteProject(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	if err := requireAdmin(r); err != nil {
		return err
	}
	if why := s.projectDeleteBlockers(project); len(why) > 0 {
		return conflict("project %q still has %s; then delete the project", project, strings.Join(why, "; "))
	}
	var muts []store.Mutation
	logs := map[string][]string{}
	for _, run := range s.store.Runs().ByProject(project) {
		m, jobs := runDeletion(s.store, run)
		muts = append(muts, m...)
		logs[run.ID] = jobs
	}
	for _, k := range []store.Kind{store.KindMember, store.KindQueue, store.KindSecret, store.KindGateway} {
		for _, rec := range s.store.Collection(k).ByProject(project) {
			muts = append(muts, store.Delete(k, rec.ID))
		}
	}
	serviceKeysMu.Lock()
	defer serviceKeysMu.Unlock()
	keys, err := s.serviceKeyMutations(r.Context(), serviceKeysDir+"/names/"+project)
	if err != nil {
		return err
	}
	tokens, err := s.hosts.projectTokenMutations(r.Context(), project)
	if err != nil {
		return err
	}
	muts = append(append(append(muts, keys...), tokens...), store.Delete(store.KindProject, project))
	if _, err := s.store.Apply(r.Context(), muts...); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return conflict("project %q changed meanwhile; try again", project)
		}
		return err
	}
	for run, jobs := range logs {
		s.removeJobLogs(run, jobs)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// projectDeleteBlockers names what keeps project from being deleted, each
// with the command that removes it.
func (s *accountsAPI) projectDeleteBlockers(project string) []string {
	var why []string
	var active []string
	for _, run := range s.store.Runs().ByProject(project) {
		if !finishedRun(run.Status) {
			active = append(active, run.Name+" ("+run.Status+")")
		}
	}
	if len(active) > 0 {
		sort.Strings(active)
		why = append(why, fmt.Sprintf("runs that are not finished: %s; stop each (gpud stop RUN --project %s)", strings.Join(active, ", "), project))
	}
	// Fleets are live: hosts, agents on them, tokens that admit more.
	// Deleting the fleet tears all of that down (handleDeleteFleet).
	if names := recordNames(s.store.Fleets().ByProject(project)); len(names) > 0 {
		why = append(why, fmt.Sprintf("fleets %v; delete each first (gpud fleet delete NAME --project %s), which stops its hosts' agents, removes its instances and its registration tokens", names, project))
	}
	// Volumes hold data on hosts: deleting one asks its host's agent to
	// remove it (deleteVolume).
	if names := recordNames(s.store.Volumes().ByProject(project)); len(names) > 0 {
		why = append(why, fmt.Sprintf("volumes %v; delete each first (gpud volume delete NAME --project %s), which removes its data on its host", names, project))
	}
	// Backends run plugins holding sealed credentials: deleting one stops
	// its plugin once it runs no gangs (handleDeleteBackend).
	var apiBackends, configBackends []string
	for _, b := range s.store.Backends().ByProject(project) {
		if s.backendSource(b) == backendSourceConfig {
			configBackends = append(configBackends, b.Name)
		} else {
			apiBackends = append(apiBackends, b.Name)
		}
	}
	if len(apiBackends) > 0 {
		sort.Strings(apiBackends)
		why = append(why, fmt.Sprintf("backends %v; delete each first (gpud backend delete NAME --project %s), which stops its plugin", apiBackends, project))
	}
	if len(configBackends) > 0 {
		sort.Strings(configBackends)
		why = append(why, fmt.Sprintf("backends %v from the server's configuration file; remove them there and restart the server", configBackends))
	}
	return why
}

// recordNames is the sorted names of recs.
func recordNames(recs []store.Record) []string {
	names := make([]string, len(recs))
	for i, r := range recs {
		names[i] = r.Name
	}
	sort.Strings(names)
	return names
}

// releaseFinishedJobs is what deleting fleet does with the jobs bound to
// its host inst: a job that is not finished refuses the delete (naming its
// run); a finished one is kept as the run's history, unbound from the host
// that goes (else it would name an instance that no longer exists).
// Before, every job record on the host refused the delete, so a fleet
// that ever ran a job could not be deleted until each of its runs was.
func (s *fleetsAPI) releaseFinishedJobs(fleet string, inst store.Record) ([]store.Mutation, error) {
	var muts []store.Mutation
	var busy []string
	for _, j := range s.store.Jobs().ByInstance(inst.ID) {
		if !finishedJob(j.Status) {
			name := j.Run
			if run, err := s.store.Runs().Get(j.Run); err == nil {
				name = run.Name
			}
			busy = append(busy, fmt.Sprintf("%s (job %s, %s)", name, j.ID, j.Status))
			continue
		}
		j.Instance = ""
		muts = append(muts, store.Update(j))
	}
	if len(busy) > 0 {
		sort.Strings(busy)
		return nil, conflict("fleet %q has jobs that are not finished on %s: runs %s; stop them first (gpud stop RUN)", fleet, inst.Name, strings.Join(busy, ", "))
	}
	return muts, nil
}
