package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	agentclient "gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// dispatcher owns jobs once they are bound: it starts each on its host's
// agent with its cluster environment (dispatch_clusterenv.go), watches it,
// copies its output into the store (dispatch_logs.go), applies the agent's
// status reports and stops it.
type dispatcher struct{ *Server }

// tracker remembers which jobs have a goroutine working on them, so a job
// is dispatched, watched or stopped once however often the feed wakes us.
type tracker struct {
	mu sync.Mutex
	m  map[string]bool
	// released is closed (and forgotten) at the next release, so a waiter
	// (a log stream waiting for its job's follower to end) wakes then.
	released chan struct{}
}

// claim returns true if key was not claimed yet, and claims it.
func (t *tracker) claim(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]bool{}
	}
	if t.m[key] {
		return false
	}
	t.m[key] = true
	return true
}

func (t *tracker) release(key string) {
	t.mu.Lock()
	delete(t.m, key)
	if t.released != nil {
		close(t.released)
		t.released = nil
	}
	t.mu.Unlock()
}

// releases returns a channel closed at the next release of any key; take
// it before checking held so a release in between is not missed.
func (t *tracker) releases() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.released == nil {
		t.released = make(chan struct{})
	}
	return t.released
}

// dispatch starts a bound job on its host's agent, then watches it.
func (s *dispatcher) dispatch(id string) {
	if !s.working.claim("dispatch/" + id) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.working.release("dispatch/" + id)
		s.runJob(s.ctx, id)
	}()
}

func (s *dispatcher) runJob(ctx context.Context, id string) {
	j, err := s.store.Jobs().Get(id)
	if err != nil || j.Status != store.JobProvisioning {
		return
	}
	if _, _, onBackend := backendOfNode(j.Instance); onBackend {
		s.dispatchBackend(ctx, j) // a job backend starts its whole gang at once (backend_dispatch.go)
		return
	}
	if blocked, err := s.reconciler.startupBlocked(j); err != nil || blocked {
		// Blocked: the first running node of its run dispatches it again.
		// A corrupt record of its run (logged once) holds it back.
		return
	}
	link := s.agents.get(j.Instance)
	if link == nil || link.client == nil {
		s.interruptJob(ctx, id, "the host "+j.Instance+" has no agent connected")
		return
	}
	if !s.hostServes(j.Instance, j.Project) {
		// The scheduler never places a job there (projectNodes); this
		// keeps the job's secrets off another project's host regardless.
		s.interruptJob(ctx, id, "the host "+j.Instance+" does not serve project "+j.Project)
		return
	}
	// A job whose record does not decode cannot be started: its spec or
	// env would be empty. It stays provisioning, logged, for an admin.
	js, err := s.jobSpec(j)
	if err != nil {
		return // logged once by jobSpec
	}
	sealed, err := sealedOf(j)
	if err != nil {
		s.log.Error().Err(err).Str("job", j.ID).Str("run", j.Run).Msg("not started: its sealed env does not decode")
		return
	}
	spec := js.Spec
	if spec.Image == "" {
		// Runs without an image get the server's default image, as on
		// dstack; the embedded server has none and runs them as processes
		// (Options.Embedded), and a process-runtime host ignores images.
		spec.Image = s.opts.DefaultImage
	}
	spec.Env, spec.RegistryAuth = withJobIdentity(sealed.Env, js), sealed.RegistryAuth
	if spec.Env, err = s.routerEnv(ctx, j, js, spec.Env); err != nil {
		if !errors.Is(err, errRouterNotPlaced) {
			s.failJob(ctx, id, err.Error())
		}
		return // not placed: the resync dispatches it again (router_groups.go)
	}
	if sealed.Commands != nil {
		spec.Commands = sealed.Commands
	}
	if sealed.Repos != nil {
		spec.Repos = sealed.Repos
	}
	spec.GPUs = s.jobGPUs(j.Instance, js)
	spec.Volumes = s.volumesFor(j.Instance, spec.Volumes)
	if spec.Cluster, err = s.jobCluster(ctx, j, js); err != nil {
		s.log.Error().Err(err).Str("job", j.ID).Str("run", j.Run).Msg("not started: a record of its gang does not decode")
		return
	}
	err = s.updateJob(ctx, id, func(j *store.Record, js *jobRecordSpec) (bool, []store.Mutation) {
		if j.Status != store.JobProvisioning {
			return false, nil
		}
		j.Status, j.Reason = store.JobPulling, "starting on "+j.Instance
		return true, nil
	})
	if err != nil {
		// Starting it anyway would leave the store behind the agent; the
		// resync dispatches it again.
		s.logJobUpdate(err, j, "not started: record it as pulling")
		return
	}
	if spec.Upload != "" {
		if err := s.pushUpload(ctx, link, j.Project, spec.Upload); err != nil {
			if ctx.Err() == nil {
				s.failJob(ctx, id, "the run's repos and files could not reach "+j.Instance+": "+err.Error())
			}
			return
		}
	}
	st, err := link.client.Start(ctx, spec)
	if err != nil {
		var ae *agentclient.Error
		if errors.As(err, &ae) && ae.Job != nil {
			s.applyAgentStatus(ctx, *ae.Job)
		} else if existing, gerr := link.client.Get(ctx, id); gerr == nil {
			// Started by a previous server process: adopt it.
			s.applyAgentStatus(ctx, existing)
		} else if ctx.Err() == nil {
			s.failJob(ctx, id, "the agent could not start the job: "+err.Error())
			return
		} else {
			return
		}
	} else {
		s.applyAgentStatus(ctx, st)
	}
	s.watch(id, link)
}

// jobGPUs turns the placement's device indices into the agent's devices.
func (s *dispatcher) jobGPUs(instance string, js jobRecordSpec) api.JobGPUs {
	var g api.JobGPUs
	for _, d := range js.Devices {
		g.Devices = append(g.Devices, fmt.Sprint(d))
	}
	if js.Request.GPU > 0 && js.Request.GPU < 1000 {
		g.Share = float64(js.Request.GPU) / 1000
	}
	return g
}

// watch follows a started job until it ends: its exit (the agent's Wait
// blocks, no polling) and its logs.
func (s *dispatcher) watch(id string, link *agentLink) {
	if !s.working.claim("watch/" + id) {
		return
	}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		defer s.working.release("watch/" + id)
		for s.ctx.Err() == nil {
			st, err := link.client.Wait(s.ctx, id)
			if err == nil && st.State.Finished() {
				s.applyAgentStatus(s.ctx, st)
				return
			}
			if agentclient.IsNotFound(err) {
				s.interruptJob(s.ctx, id, "the agent no longer has the job")
				return
			}
			if j, gerr := s.store.Jobs().Get(id); gerr != nil || finishedJob(j.Status) {
				return // ended without its agent (its host was lost)
			}
			select {
			case <-s.ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	go func() {
		defer s.wg.Done()
		if !s.working.claim("logs/" + id) {
			return
		}
		defer s.working.release("logs/" + id)
		s.followLogs(s.ctx, id, link)
	}()
}

// failJob ends a job as failed with reason.
func (s *dispatcher) failJob(ctx context.Context, id, reason string) {
	s.endFailed(ctx, id, reason, false)
}

// interruptJob ends a job its host lost as failed and interrupted (retry's
// interruption event).
func (s *dispatcher) interruptJob(ctx context.Context, id, reason string) {
	s.endFailed(ctx, id, reason, true)
}

func (s *dispatcher) endFailed(ctx context.Context, id, reason string, interrupted bool) {
	err := s.updateJob(ctx, id, func(j *store.Record, js *jobRecordSpec) (bool, []store.Mutation) {
		if finishedJob(j.Status) {
			return false, nil
		}
		js.Interrupted = interrupted
		j.Status, j.Reason = store.JobFailed, reason
		js.FinishedAt = s.now()
		return true, []store.Mutation{s.event(j.Project, store.KindJob, j.ID, j.Status, reason)}
	})
	s.logJobUpdateID(err, id, "record a failed job ("+reason+")")
}

// applyAgentStatus copies the agent's view of a job into the store: the
// agent's states are a subset of the server's job statuses.
func (s *dispatcher) applyAgentStatus(ctx context.Context, st api.JobStatus) {
	err := s.updateJob(ctx, st.ID, func(j *store.Record, js *jobRecordSpec) (bool, []store.Mutation) {
		if finishedJob(j.Status) {
			return false, nil
		}
		status, reason := string(st.State), j.Reason
		if status == string(api.JobTerminating) || (j.Status == store.JobTerminating && !st.State.Finished()) {
			status = store.JobTerminating
		}
		switch st.State {
		case api.JobRunning:
			if status != store.JobTerminating {
				reason = "running on " + j.Instance
			}
		case api.JobDone:
			reason = "exited with code 0"
		case api.JobFailed:
			reason = fmt.Sprintf("exited with code %d", st.ExitCode)
			if st.Reason != "" && st.Reason != api.ExitExited {
				reason = fmt.Sprintf("%s (exit code %d)", st.Reason, st.ExitCode)
			}
			if st.Message != "" {
				reason += ": " + st.Message
			}
			js.Interrupted = st.Reason == api.ExitLost
		case api.JobTerminated:
			if j.Reason == "" || j.Status != store.JobTerminating {
				reason = "stopped"
			}
			if js.Abort {
				status = store.JobAborted
			}
		}
		if status == j.Status && len(js.Ports) == len(st.Ports) {
			return false, nil
		}
		j.Status, j.Reason = status, reason
		js.Ports = st.Ports
		if !st.StartedAt.IsZero() {
			js.StartedAt = st.StartedAt
		}
		if st.State.Finished() {
			code := st.ExitCode
			js.ExitCode = &code
			js.FinishedAt = st.FinishedAt
			if js.FinishedAt.IsZero() {
				js.FinishedAt = s.now()
			}
		}
		return true, []store.Mutation{s.event(j.Project, store.KindJob, j.ID, status, reason)}
	})
	s.logJobUpdateID(err, st.ID, "record the agent's job status "+string(st.State))
}

// stopJob asks the agent to stop a terminating job; the watcher records
// the end.
func (s *dispatcher) stopJob(id string) {
	if !s.working.claim("stop/" + id) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.working.release("stop/" + id)
		j, err := s.store.Jobs().Get(id)
		if err != nil || j.Status != store.JobTerminating {
			return
		}
		if _, _, onBackend := backendOfNode(j.Instance); onBackend {
			s.stopBackendGang(s.ctx, j) // Backend.Stop, for the whole gang (backend_dispatch.go)
			return
		}
		link := s.agents.get(j.Instance)
		if link == nil || link.client == nil {
			s.endStopped(s.ctx, id, "its host has no agent connected")
			return
		}
		st, err := link.client.Stop(s.ctx, id)
		switch {
		case agentclient.IsNotFound(err):
			s.endStopped(s.ctx, id, "the agent no longer had it")
			return
		case err != nil:
			s.log.Warn().Err(err).Str("job", id).Msg("stop failed; the resync retries it")
			return
		}
		s.applyAgentStatus(s.ctx, st)
		s.watch(id, link)
	}()
}

// endStopped finishes a terminating job nobody can stop any more.
func (s *dispatcher) endStopped(ctx context.Context, id, why string) {
	err := s.updateJob(ctx, id, func(j *store.Record, js *jobRecordSpec) (bool, []store.Mutation) {
		if finishedJob(j.Status) {
			return false, nil
		}
		j.Status = store.JobTerminated
		if js.Abort {
			j.Status = store.JobAborted
		}
		j.Reason += "; " + why
		js.FinishedAt = s.now()
		return true, []store.Mutation{s.event(j.Project, store.KindJob, j.ID, j.Status, j.Reason)}
	})
	s.logJobUpdateID(err, id, "record a stopped job ("+why+")")
}

// held reports whether key is claimed.
func (t *tracker) held(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[key]
}

// hostServes reports whether instance's fleet is visible to project, so
// its jobs (and their secrets) may go to that host.
func (s *dispatcher) hostServes(instance, project string) bool {
	inst, err := s.store.Instances().Get(instance)
	if err != nil {
		return false
	}
	f, err := s.store.Fleets().Get(inst.Fleet)
	return err == nil && visibleFleet(project, f)
}
