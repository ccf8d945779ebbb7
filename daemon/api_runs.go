package daemon

import (
	"errors"
	"net/http"
	"sort"
	"strings"
	"sync"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// runsAPI serves the HTTP API of runs: planning and submitting them
// (api_submit.go, api_inplace.go), listing, stopping and deleting them, their
// events, their logs (api_logs.go) and their services (api_proxy.go).
type runsAPI struct{ *Server }

// nameLocks serializes submissions of the same run name in a project, so
// two applies never both create it.
type nameLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (n *nameLocks) lock(key string) func() {
	n.mu.Lock()
	if n.locks == nil {
		n.locks = map[string]*sync.Mutex{}
	}
	m := n.locks[key]
	if m == nil {
		m = &sync.Mutex{}
		n.locks[key] = m
	}
	n.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// readRunSubmission is what plan and apply share: it checks that the caller
// holds at least the user role in the path's project, decodes the
// ApplyRunRequest body and builds the run and its jobs from the
// configuration, without writing anything. The run's Project and User are
// the path's project and the caller.
func (s *runsAPI) readRunSubmission(w http.ResponseWriter, r *http.Request) (*submission, api.ApplyRunRequest, error) {
	var req api.ApplyRunRequest
	project, c, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return nil, req, err
	}
	if err := decodeJSON(w, r, &req); err != nil {
		return nil, req, err
	}
	cfg, err := parseConfig(req.ApplyRequest)
	if err != nil {
		return nil, req, err
	}
	verdict, err := s.checkRunFields(project, cfg)
	if err != nil {
		var el api.ErrorList
		if errors.As(err, &el) {
			return nil, req, notHonoured(el)
		}
		return nil, req, err
	}
	sub, err := s.buildRun(project, c.name, req, cfg, verdict.targets)
	if sub != nil {
		sub.notes = append(verdict.notes, placementNotes(cfg)...)
	}
	return sub, req, err
}

func (s *runsAPI) handlePlanRun(w http.ResponseWriter, r *http.Request) error {
	sub, _, err := s.readRunSubmission(w, r)
	if err != nil {
		return err
	}
	project := sub.run.Project
	sub.run.Status = store.RunPending
	out, err := s.runOut(sub.run, sub.jobs)
	if err != nil {
		return err
	}
	plan := api.RunPlan{Action: "create", Run: out, Notes: sub.notes}
	_, active, err := s.checkNameFree(project, sub.run.Name, true)
	if err != nil {
		return err
	}
	if active != nil {
		plan.Action = "replace"
		if _, _, changed, ok, err := s.rollingTarget(sub); err == nil && ok && changed {
			plan.Action = "update" // a rolling update (rollout.go); force replaces
		}
	}
	var req0 taskRequest
	if len(sub.jobs) > 0 {
		js, err := jobSpecOf(sub.jobs[0])
		if err != nil {
			return err
		}
		req0 = js.Request
	}
	plan.Offers = s.fleetsAPI.offers(project, req0)
	if plan.Offers, err = s.placedOffers(project, sub.run, req0, plan.Offers); err != nil {
		return err
	}
	if len(plan.Offers) == 0 {
		plan.Message = "no idle instance fits one job now; the run waits in its queue until capacity frees up"
	}
	writeJSON(w, http.StatusOK, plan)
	return nil
}

func (s *runsAPI) handleApplyRun(w http.ResponseWriter, r *http.Request) error {
	sub, req, err := s.readRunSubmission(w, r)
	if err != nil {
		return err
	}
	project, user := sub.run.Project, sub.run.User
	unlock := s.names.lock(project + "/" + sub.run.Name)
	defer unlock()
	if run, ok, err := s.applyPriorityInPlace(sub, user); err != nil || ok {
		if err != nil {
			return err
		}
		return s.writeRun(w, http.StatusOK, run)
	}
	if run, ok, err := s.applyRollingUpdate(sub, user, req.Force); err != nil || ok {
		if err != nil {
			return err
		}
		return s.writeRun(w, http.StatusOK, run)
	}
	muts, active, err := s.checkNameFree(project, sub.run.Name, req.Force)
	if err != nil {
		return err
	}
	if active != nil {
		// Replacing an active run: stop it; the new one waits in the
		// queue until the old one's resources are released.
		stop, err := s.reconciler.stopMutations(*active, false, "replaced by a new submission from "+user)
		if err != nil {
			return err
		}
		muts = append(muts, stop...)
	}
	muts = append(muts, store.Create(sub.run))
	for _, j := range sub.jobs {
		muts = append(muts, store.Create(j))
	}
	muts = append(muts, s.event(project, store.KindRun, sub.run.ID, store.RunSubmitted, sub.run.Reason))
	if _, err := s.store.Apply(r.Context(), muts...); err != nil {
		return err
	}
	run, err := s.store.Runs().Get(sub.run.ID)
	if err != nil {
		return err
	}
	return s.writeRun(w, http.StatusCreated, run)
}

// writeRun sends the API view of run and its jobs; a corrupt record among
// them fails the request (500 naming it).
func (s *runsAPI) writeRun(w http.ResponseWriter, status int, run store.Record) error {
	out, err := s.runOut(run, s.store.Jobs().ByRun(run.ID))
	if err != nil {
		return err
	}
	writeJSON(w, status, out)
	return nil
}

// findRun returns the run named in the path, active ones first.
func (s *runsAPI) findRun(project, name string) (store.Record, error) {
	var found *store.Record
	for _, r := range s.store.Runs().ByProject(project) {
		if r.Name == name || r.ID == name {
			rc := r
			if found == nil || (finishedRun(found.Status) && !finishedRun(r.Status)) || found.CreatedAt.Before(r.CreatedAt) {
				found = &rc
			}
		}
	}
	if found == nil {
		return store.Record{}, notFound("run", name)
	}
	return *found, nil
}

// authorizedRun is the preamble of the handlers whose path names a
// {project} and a {run} (get, delete, logs, service proxy): it checks that the caller holds at least
// the user role in the path's project, then returns the run the path names
// (see findRun), or the authorization or not-found error to send back.
func (s *runsAPI) authorizedRun(r *http.Request) (store.Record, error) {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return store.Record{}, err
	}
	return s.findRun(project, r.PathValue("run"))
}

func (s *runsAPI) handleListRuns(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	all := r.URL.Query().Get("all") == "true"
	runs := s.store.Runs().ByProject(project)
	sort.Slice(runs, func(i, j int) bool { return runs[i].CreatedAt.After(runs[j].CreatedAt) })
	out := []api.Run{}
	for _, run := range runs {
		if !all && finishedRun(run.Status) {
			continue
		}
		o, err := s.runOut(run, s.store.Jobs().ByRun(run.ID))
		if err != nil {
			continue // left out of the listing; the record was logged once
		}
		out = append(out, o)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *runsAPI) handleGetRun(w http.ResponseWriter, r *http.Request) error {
	run, err := s.authorizedRun(r)
	if err != nil {
		return err
	}
	return s.writeRun(w, http.StatusOK, run)
}

func (s *runsAPI) handleStopRun(w http.ResponseWriter, r *http.Request) error {
	project, c, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	var req api.StopRunRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			return err
		}
	}
	run, err := s.findRun(project, r.PathValue("run"))
	if err != nil {
		return err
	}
	reason := "stopped by " + c.name
	if req.Abort {
		reason = "aborted by " + c.name
	}
	// The reconcilers update runs concurrently: retry on a version conflict.
	for attempt := 0; !finishedRun(run.Status); attempt++ {
		muts, err := s.reconciler.stopMutations(run, req.Abort, reason)
		if err != nil {
			return err
		}
		_, err = s.store.Apply(r.Context(), muts...)
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		if attempt == 20 {
			return conflict("the run keeps changing; try again")
		}
		conflictPause(attempt)
		if run, err = s.store.Runs().Get(run.ID); err != nil {
			return err
		}
	}
	run, err = s.store.Runs().Get(run.ID)
	if err != nil {
		return err
	}
	return s.writeRun(w, http.StatusOK, run)
}

func (s *runsAPI) handleEvents(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	prefix := ""
	if name := r.PathValue("run"); name != "" {
		run, err := s.findRun(project, name)
		if err != nil {
			return err
		}
		prefix = run.ID
	}
	after := r.URL.Query().Get("after")
	out := []api.Event{}
	for _, e := range s.store.Events().ByProject(project) {
		if e.ID <= after {
			continue
		}
		kind, subject, _ := strings.Cut(e.Name, "/")
		if prefix != "" && !strings.HasPrefix(subject, prefix) {
			continue
		}
		out = append(out, api.Event{ID: e.ID, Time: e.CreatedAt, Project: e.Project, Kind: kind, Subject: subject, Name: s.subjectName(project, kind, subject),
			Status: e.Status, Reason: s.eventReason(project, kind, e.Reason)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if len(out) > 1000 {
		out = out[len(out)-1000:]
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// runOut is the API view of a run and its jobs; a corrupt record among
// them is an error.
func (s *runsAPI) runOut(run store.Record, jobs []store.Record) (api.Run, error) {
	st, err := s.runSpec(run)
	if err != nil {
		return api.Run{}, err
	}
	out := api.Run{
		ID: run.ID, Name: run.Name, Project: run.Project, User: run.User, Type: st.Type, Status: run.Status,
		Reason: s.readableReason(run.Project, run.Reason), Queue: strings.TrimPrefix(run.Queue, run.Project+"/"), Priority: st.Priority,
		Configuration: st.Config, ExitCode: st.ExitCode, Attempt: st.Attempt,
		SubmittedAt: st.SubmittedAt, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt, Jobs: []api.Job{},
	}
	if st.Type == api.KindService {
		out.ServiceURL = "/proxy/services/" + run.Project + "/" + run.Name + "/"
	}
	out.IDELink = ideLink(run.Name, st.Config)
	now := s.now()
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ID < jobs[j].ID })
	for _, j := range jobs {
		js, err := s.jobSpec(j)
		if err != nil {
			return api.Run{}, err
		}
		cost := jobCost(js.Price, js.StartedAt, js.BoundAt, jobEnd(j.Status, js.FinishedAt, st.FinishedAt), now)
		out.Cost += cost
		if js.Attempt != st.Attempt {
			continue
		}
		why := s.whyPendingOf(j, js.WhyPending) // in the project's names, with who took it back (reason_names.go)
		if out.WhyPending == "" && why != "" {
			out.WhyPending = why
		}
		var ready *bool
		if st.Type == api.KindService && j.Status == store.JobRunning {
			ok := s.replicaReady(j.ID)
			ready = &ok
		}
		out.Jobs = append(out.Jobs, api.Job{
			ID: j.ID, Name: j.Name, ReplicaNum: js.ReplicaNum, NodeRank: js.NodeRank, Group: js.Group, Status: s.jobStatusOut(j),
			Reason: s.readableReason(j.Project, j.Reason), WhyPending: why, Instance: j.Instance, GPUs: js.Devices,
			Price: js.Price, Cost: cost, ExitCode: js.ExitCode, Ports: js.Ports, SubmittedAt: js.SubmittedAt, StartedAt: js.StartedAt,
			FinishedAt: js.FinishedAt,
			Resources: api.JobRequest{GPU: float64(js.Request.GPU) / 1000, GPUName: js.Request.GPUName,
				GPUMemory: api.Size(js.Request.GPUMemory), GPUMemoryMax: api.Size(js.Request.GPUMemoryMax),
				CPU: float64(js.Request.CPU) / 1000, Memory: api.Size(js.Request.Memory)},
			Ready: ready,
		})
	}
	return out, nil
}
