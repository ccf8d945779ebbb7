package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/store"
)

// Jobs on job backends (issue 17, docs/backends.md "How runs use a
// backend"). A gang the scheduler admitted onto a backend's capacity
// (backend_capacity.go) is started with one Backend.StartGang call: every
// job of the gang with the job spec an agent would get (buildBackendSpec),
// its DSTACK_* cluster environment included. The backend protocol has no
// push, so each started gang is polled with Backend.Status every
// backendPollEvery, and what it reports goes through the same transitions
// as an agent's reports (applyAgentStatus: running, exited with a code,
// failed with a reason); each job's output is copied with Backend.Logs
// into the store's job logs, the ones `gpud logs` reads. A stop is one
// Backend.Stop for the gang, and a gang whose jobs have all finished is
// stopped too, which deletes what the backend created for it. After a
// plugin or a server restart the gangs are polled again (the loop in
// backend_capacity.go): what the engine still runs is kept.

// backendPollEvery is how often a started gang's status is read.
const backendPollEvery = time.Second

// backendGangID names the gang of job j within the server: its run, its
// attempt and (for a service replica) its replica.
func backendGangID(j store.Record, js jobRecordSpec) string {
	return fmt.Sprintf("%s-%d-%d", j.Run, js.Attempt, js.ReplicaNum)
}

// backendGang is the gang of one job, as the store holds it now.
type backendGang struct {
	id, project, name string
	backend           plugins.Backend // nil: the backend is gone
	jobs              []store.Record  // by node rank
	grace             time.Duration
}

// gangOf reads the gang of job j from the store: the jobs of its run,
// attempt and replica bound to the same backend. ok is false when a
// record does not decode (logged once by jobSpec).
func (s *dispatcher) gangOf(j store.Record) (g backendGang, ok bool) {
	js, err := s.jobSpec(j)
	if err != nil {
		return g, false
	}
	project, name, _ := backendOfNode(j.Instance)
	g = backendGang{id: backendGangID(j, js), project: project, name: name, grace: js.Spec.StopDuration}
	if js.Abort {
		g.grace = 0
	}
	if project == j.Project {
		// Only the job's own project's backends (the scheduler places it
		// nowhere else: projectNodes; this keeps its secrets there anyway).
		g.backend = s.Backends(project)[name]
	}
	rank := map[string]int{}
	for _, o := range s.store.Jobs().ByRun(j.Run) {
		os, err := s.jobSpec(o)
		if err != nil {
			return g, false
		}
		op, oname, onBackend := backendOfNode(o.Instance)
		if os.Attempt != js.Attempt || os.ReplicaNum != js.ReplicaNum || !onBackend || op != project || oname != name {
			continue
		}
		rank[o.ID] = os.NodeRank
		g.jobs = append(g.jobs, o)
	}
	slices.SortFunc(g.jobs, func(a, b store.Record) int { return cmp.Compare(rank[a.ID], rank[b.ID]) })
	return g, true
}

// dispatchBackend starts the gang of a bound job j on its backend: all its
// jobs in one StartGang, once every one of them is bound and none has
// started (the startup order does not apply: the gang starts at once).
func (s *dispatcher) dispatchBackend(ctx context.Context, j store.Record) {
	g, ok := s.gangOf(j)
	if !ok {
		return
	}
	if !s.working.claim("backend-gang/" + g.id) {
		return // another job of the gang is starting it
	}
	defer s.working.release("backend-gang/" + g.id)
	if g.backend == nil {
		for _, m := range g.jobs {
			s.failJob(ctx, m.ID, "the backend "+g.name+" of project "+g.project+" is gone (deleted, or its plugin did not start)")
		}
		return
	}
	for _, m := range g.jobs {
		if m.Status != store.JobProvisioning {
			if !finishedJob(m.Status) {
				s.pollBackendGang(j) // started already: follow it
			}
			return
		}
	}
	s.startBackendGang(ctx, g, j.Queue)
	s.pollBackendGang(j)
}

// startBackendGang builds the gang's job specs, records its jobs as
// pulling and calls StartGang (idempotent on the gang id: a second call,
// after a restart, is a no-op).
func (s *dispatcher) startBackendGang(ctx context.Context, g backendGang, queue string) {
	gang := plugins.Gang{ID: g.id, Project: g.project, Queue: queue, Service: s.serviceGang(g)}
	for _, m := range g.jobs {
		spec, ok := s.buildBackendSpec(ctx, m)
		if !ok {
			return // stays provisioning, logged, for an admin
		}
		gang.Jobs = append(gang.Jobs, spec)
	}
	withoutImages(ctx, g.backend, gang.Jobs) // backend_images.go
	for _, m := range g.jobs {
		err := s.updateJob(ctx, m.ID, func(j *store.Record, _ *jobRecordSpec) (bool, []store.Mutation) {
			if j.Status != store.JobProvisioning {
				return false, nil
			}
			j.Status, j.Reason = store.JobPulling, "starting on backend "+g.name
			return true, nil
		})
		if err != nil {
			s.logJobUpdate(err, m, "not started: record it as pulling")
			return
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := g.backend.StartGang(sctx, gang); err != nil && ctx.Err() == nil {
		for _, m := range g.jobs {
			s.failJob(ctx, m.ID, "the backend "+g.name+" could not start the gang: "+err.Error())
		}
		return
	}
	s.log.Info().Str("project", g.project).Str("backend", g.name).Str("gang", g.id).Int("jobs", len(gang.Jobs)).Msg("gang started on a job backend")
}

// buildBackendSpec is the job spec a job backend starts j with: the spec
// the agents get (its sealed environment, commands, the default image,
// devices, the cluster environment), without what only an agent's host
// has (uploads and instance volumes, which the field rules keep off
// backends); the volumes of the backend's own (claims) stay.
func (s *dispatcher) buildBackendSpec(ctx context.Context, j store.Record) (api.JobSpec, bool) {
	js, err := s.jobSpec(j)
	if err != nil {
		return api.JobSpec{}, false
	}
	sealed, err := sealedOf(j)
	if err != nil {
		s.log.Error().Err(err).Str("job", j.ID).Str("run", j.Run).Msg("not started: its sealed env does not decode")
		return api.JobSpec{}, false
	}
	spec := js.Spec
	if spec.Image == "" {
		spec.Image = s.opts.DefaultImage
	}
	spec.Env, spec.RegistryAuth = withJobIdentity(sealed.Env, js), sealed.RegistryAuth
	if sealed.Commands != nil {
		spec.Commands = sealed.Commands
	}
	if sealed.Repos != nil {
		spec.Repos = sealed.Repos
	}
	spec.GPUs = s.jobGPUs(j.Instance, js)
	spec.Volumes, spec.Upload = backendJobVolumes(spec.Volumes), ""
	if spec.Cluster, err = s.jobCluster(ctx, j, js); err != nil {
		s.log.Error().Err(err).Str("job", j.ID).Str("run", j.Run).Msg("not started: a record of its gang does not decode")
		return api.JobSpec{}, false
	}
	return spec, true
}

// pollBackendGang follows the started gang of job j until its jobs have
// all finished, then stops it (deleting what the backend created).
func (s *dispatcher) pollBackendGang(j store.Record) {
	g, ok := s.gangOf(j)
	if !ok || !s.working.claim("backend-poll/"+g.id) {
		return
	}
	s.wg.Go(func() {
		defer s.working.release("backend-poll/" + g.id)
		s.pollGang(s.ctx, j)
	})
}

func (s *dispatcher) pollGang(ctx context.Context, j0 store.Record) {
	missing := map[string]int{}
	for ctx.Err() == nil {
		j, err := s.store.Jobs().Get(j0.ID)
		if err != nil {
			return
		}
		g, ok := s.gangOf(j)
		if !ok {
			return
		}
		if !slices.ContainsFunc(g.jobs, func(m store.Record) bool { return !finishedJob(m.Status) }) {
			s.cleanUpGang(ctx, g)
			return
		}
		if g.backend == nil {
			for _, m := range g.jobs {
				s.interruptJob(ctx, m.ID, "the backend "+g.name+" of project "+g.project+" is gone")
			}
		} else {
			s.pollOnce(ctx, g, missing)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backendPollEvery):
		}
	}
}

// pollOnce reads the gang's status once and applies it. A job the backend
// no longer reports, three times running, is interrupted; a gang the
// backend never got (the server stopped between recording it pulling and
// StartGang) is started again.
func (s *dispatcher) pollOnce(ctx context.Context, g backendGang, missing map[string]int) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	sts, err := g.backend.Status(sctx, g.id)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn().Err(err).Str("backend", g.name).Str("gang", g.id).Msg("backend status; polling again")
		}
		return
	}
	if len(sts) == 0 && !slices.ContainsFunc(g.jobs, func(m store.Record) bool { return m.Status != store.JobPulling }) {
		missing[""]++
		if missing[""] >= 3 {
			missing[""] = 0
			s.restartPulling(ctx, g)
		}
		return
	}
	for _, m := range g.jobs {
		if finishedJob(m.Status) {
			continue
		}
		i := slices.IndexFunc(sts, func(st api.JobStatus) bool { return st.ID == m.ID })
		if i < 0 {
			if missing[m.ID]++; missing[m.ID] >= 3 {
				s.interruptJob(ctx, m.ID, "the backend "+g.name+" no longer has the job")
			}
			continue
		}
		missing[m.ID] = 0
		st := sts[i]
		if m.Status == store.JobTerminating && !st.State.Finished() {
			continue // being stopped (stopBackendGang)
		}
		s.withSpecPorts(m, &st)
		s.applyAgentStatus(ctx, st)
		s.noteBackendWaiting(ctx, g.name, st) // backend_waiting.go
		if st.State != api.JobPulling {
			s.followBackendLogs(g.backend, m.ID)
		}
	}
}

// restartPulling starts again a gang recorded as pulling that the backend
// does not know.
func (s *dispatcher) restartPulling(ctx context.Context, g backendGang) {
	for _, m := range g.jobs {
		err := s.updateJob(ctx, m.ID, func(j *store.Record, _ *jobRecordSpec) (bool, []store.Mutation) {
			if j.Status != store.JobPulling {
				return false, nil
			}
			j.Status = store.JobProvisioning
			return true, nil
		})
		if err != nil {
			s.logJobUpdate(err, m, "start a gang its backend never got")
			return
		}
	}
	if len(g.jobs) > 0 {
		s.dispatch(g.jobs[0].ID)
	}
}

// cleanUpGang stops a gang whose jobs have all finished, once their
// output is copied, so the backend deletes what it created.
func (s *dispatcher) cleanUpGang(ctx context.Context, g backendGang) {
	if g.backend == nil {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, m := range g.jobs {
		for s.working.held("logs/"+m.ID) && time.Now().Before(deadline) && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-s.working.releases():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := g.backend.Stop(sctx, g.id, g.grace); err != nil && ctx.Err() == nil {
		s.log.Warn().Err(err).Str("backend", g.name).Str("gang", g.id).Msg("clean up a finished gang")
	}
}

// followBackendLogs copies a job's output from its backend into the
// store's logs until the job has finished and a last read found nothing
// new; it resumes where the kept log ends (logResume), as for agents.
func (s *dispatcher) followBackendLogs(b plugins.Backend, id string) {
	if !s.working.claim("logs/" + id) {
		return
	}
	s.wg.Go(func() {
		defer s.working.release("logs/" + id)
		for s.ctx.Err() == nil {
			j, err := s.store.Jobs().Get(id)
			done := err != nil || finishedJob(j.Status)
			_, keep, err := s.logResume(id)
			if err != nil {
				s.log.Warn().Err(err).Str("job", id).Msg("read the job's kept log")
				return
			}
			if err := b.Logs(s.ctx, id, !done, keep); err != nil && s.ctx.Err() == nil {
				s.log.Debug().Err(err).Str("job", id).Msg("backend logs; reading again")
			}
			if done {
				return
			}
			select {
			case <-s.ctx.Done():
			case <-time.After(backendPollEvery):
			}
		}
	})
}

// stopBackendGang stops the gang of a terminating job with one
// Backend.Stop (its grace the run's stop_duration) and records its
// terminating jobs as stopped; a failed call is retried by the resync.
func (s *dispatcher) stopBackendGang(ctx context.Context, j store.Record) {
	g, ok := s.gangOf(j)
	if !ok {
		return
	}
	if !s.working.claim("backend-stop/" + g.id) {
		return
	}
	defer s.working.release("backend-stop/" + g.id)
	if g.backend == nil {
		for _, m := range g.jobs {
			if m.Status == store.JobTerminating {
				s.endStopped(ctx, m.ID, "its backend "+g.name+" is gone")
			}
		}
		return
	}
	sctx, cancel := context.WithTimeout(ctx, g.grace+time.Minute)
	defer cancel()
	if err := g.backend.Stop(sctx, g.id, g.grace); err != nil {
		if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			s.log.Warn().Err(err).Str("backend", g.name).Str("gang", g.id).Msg("backend stop failed; the resync retries it")
		}
		return
	}
	for _, m := range g.jobs {
		if m.Status == store.JobTerminating || m.Status == store.JobProvisioning || m.Status == store.JobPulling || m.Status == store.JobRunning {
			cur, err := s.store.Jobs().Get(m.ID)
			if err == nil && cur.Status == store.JobTerminating {
				s.applyAgentStatus(ctx, api.JobStatus{ID: m.ID, State: api.JobTerminated, FinishedAt: s.now()})
			}
		}
	}
}

// followBackendJobs makes sure every started backend job is polled (after
// a server or plugin restart): the pollers and log followers claim their
// gang and job, so this is cheap when they run.
func (s *dispatcher) followBackendJobs() {
	for _, status := range []string{store.JobPulling, store.JobRunning} {
		for _, j := range s.store.Jobs().ByStatus(status) {
			if _, _, onBackend := backendOfNode(j.Instance); onBackend {
				s.pollBackendGang(j)
			}
		}
	}
}
