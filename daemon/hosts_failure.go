package daemon

import (
	"context"
	"strings"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// Host failure. A host is found unreachable by its transport: an SSH fleet
// host's monitor (plugins/sshfleet, bounded by Options.SSHHealth: at most
// KeepaliveInterval+UnreachableAfter, 25 s by default) or a registration
// tunnel that closed (three missed keepalives). The server then
//
//   - takes the host out of scheduling (its agent link is dropped, so the
//     snapshot no longer offers it and nothing is dispatched to it);
//   - fails every job on it that was starting, running or stopping, with a
//     reason starting with ReasonInstanceUnreachable, as interrupted: the
//     run reconciler retries the run per its retry policy (on_events
//     interruption or error) as a new attempt, placed on another host;
//   - when the host answers again, links it back and reconciles the
//     agent's job list against the store: a job the agent still runs that
//     the store has finished or moved elsewhere is stopped, so no job runs
//     twice.

// ReasonInstanceUnreachable starts the reason of a job that failed because
// its host stopped answering (dstack's termination reason of that name).
const ReasonInstanceUnreachable = "instance_unreachable"

// hostLost reports whether a job's reason says its host stopped answering.
// Such a job is retried on either retry event, interruption or error.
func hostLost(reason string) bool { return strings.HasPrefix(reason, ReasonInstanceUnreachable) }

// remove drops instance's link; the scheduler stops offering the host.
func (a *agentSet) remove(instance string) {
	a.mu.Lock()
	delete(a.links, instance)
	a.mu.Unlock()
}

// hostUnreachable takes instance out of scheduling and fails the jobs on
// it with instance_unreachable (interrupted, so the retry policy applies).
// Jobs that were already being stopped end as stopped.
func (s *hosts) hostUnreachable(ctx context.Context, instance, why string) {
	if s.ctx.Err() != nil {
		return // the server is shutting down: the connections closing are its own
	}
	s.agents.remove(instance)
	reason := ReasonInstanceUnreachable + ": host " + instance + " stopped answering (" + why + ")"
	n := 0
	for _, j := range s.store.Jobs().ByInstance(instance) {
		switch j.Status {
		case store.JobProvisioning, store.JobPulling, store.JobRunning:
			s.dispatcher.interruptJob(ctx, j.ID, reason)
			s.stopGangSiblings(ctx, j, reason)
			n++
		case store.JobTerminating:
			s.dispatcher.endStopped(ctx, j.ID, reason)
			n++
		}
	}
	if n > 0 {
		s.log.Warn().Str("instance", instance).Str("why", why).Int("jobs", n).Msg("host unreachable; its jobs failed")
	}
}

// stopGangSiblings stops the other nodes of a lost job's multi-node gang:
// torchrun, MPI and the like cannot go on without a node, and the run's
// attempt must end for its retry policy to start the whole gang again.
func (s *hosts) stopGangSiblings(ctx context.Context, lost store.Record, reason string) {
	ls, err := s.jobSpec(lost)
	if err != nil {
		return // its gang is unknown (logged once by jobSpec); the lost job itself is failed
	}
	if ls.NodesNum <= 1 {
		return
	}
	why := "stopped: node " + lost.Name + " of its gang was lost (" + reason + ")"
	for _, o := range s.store.Jobs().ByRun(lost.Run) {
		os, err := s.jobSpec(o)
		if err != nil {
			continue // not known to be of this gang (logged once by jobSpec)
		}
		if o.ID == lost.ID || os.Attempt != ls.Attempt || os.ReplicaNum != ls.ReplicaNum {
			continue
		}
		err = s.updateJob(ctx, o.ID, func(j *store.Record, _ *jobRecordSpec) (bool, []store.Mutation) {
			if finishedJob(j.Status) || j.Status == store.JobTerminating || j.Status == store.JobSubmitted {
				return false, nil
			}
			j.Status, j.Reason = store.JobTerminating, why
			return true, []store.Mutation{s.event(j.Project, store.KindJob, j.ID, j.Status, why)}
		})
		s.logJobUpdate(err, o, "stop a lost node's gang sibling")
	}
}

// hostBack links a host that answers again and, in the background,
// reconciles its agent's jobs with the store.
func (s *hosts) hostBack(l *agentLink) {
	if l == nil {
		return
	}
	l.seen(s.now())
	s.agents.put(l)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.reconcileHostJobs(s.ctx, l)
	}()
}

// reconcileHostJobs compares what l's agent runs with the store when its
// host comes back: each job the agent has is adopted (adoptAgentJob); a job
// the store thinks is running there that the agent no longer has fails as
// interrupted.
func (s *hosts) reconcileHostJobs(ctx context.Context, l *agentLink) {
	if l == nil || l.client == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	have, err := l.client.List(lctx)
	if err != nil {
		s.log.Warn().Err(err).Str("instance", l.instance).Msg("list agent jobs after reconnect")
		return
	}
	onAgent := map[string]bool{}
	for _, st := range have {
		onAgent[st.ID] = true
		s.adoptAgentJob(lctx, l, st)
	}
	for _, j := range s.store.Jobs().ByInstance(l.instance) {
		if j.Status == store.JobRunning && !onAgent[j.ID] {
			s.dispatcher.interruptJob(ctx, j.ID, "the agent no longer has the job")
		}
	}
}

// adoptAgentJob takes over a job that l's agent reports (at start, or when
// its host comes back). A job the store expects on that host is brought up
// to the agent's state and watched (or its last output copied, if it
// ended). A job the store never knew, placed on another host (it was moved
// while the host was away) or has already finished is stopped when it
// still runs, with an event saying why: it would otherwise hold GPUs the
// scheduler believes are free, for ever.
func (s *hosts) adoptAgentJob(ctx context.Context, l *agentLink, st api.JobStatus) {
	j, err := s.store.Jobs().Get(st.ID)
	if err == nil && j.Instance == l.instance && !finishedJob(j.Status) {
		s.dispatcher.applyAgentStatus(ctx, st)
		if !st.State.Finished() {
			s.dispatcher.watch(st.ID, l)
			return
		}
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.dispatcher.followLogs(s.ctx, st.ID, l) }()
		return
	}
	if st.State.Finished() {
		return
	}
	why := "the server no longer knows it"
	switch {
	case err != nil:
	case j.Instance != l.instance:
		why = "it was moved: the server recorded it " + j.Status + " on " + j.Instance + " (" + j.Reason + ")"
	default:
		why = "the server recorded it " + j.Status + " (" + j.Reason + ")"
	}
	if _, err := l.client.Stop(ctx, st.ID); err != nil {
		s.log.Warn().Err(err).Str("instance", l.instance).Str("job", st.ID).Msg("stop stale job")
		return
	}
	s.log.Info().Str("instance", l.instance).Str("job", st.ID).Str("why", why).Msg("stopped a stale job")
	// The job's project sees the event; a job the server never knew has
	// none, and the instance's fleet's project (none for shared) gets it.
	project := s.instanceProject(l.instance)
	if err == nil && j.Project != "" {
		project = j.Project
	}
	if _, err := s.store.Apply(context.WithoutCancel(ctx), s.event(project, store.KindInstance, l.instance, "stale_job_stopped",
		"stopped job "+st.ID+": "+why)); err != nil {
		s.log.Warn().Err(err).Str("instance", l.instance).Msg("record stale job event")
	}
}

// instanceProject is the project of instance's fleet ("" if unknown).
func (s *hosts) instanceProject(instance string) string {
	inst, err := s.store.Instances().Get(instance)
	if err != nil {
		return ""
	}
	f, err := s.store.Fleets().Get(inst.Fleet)
	if err != nil {
		return ""
	}
	return f.Project
}
