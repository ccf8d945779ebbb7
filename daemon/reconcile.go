package daemon

import (
	"context"
	"fmt"
	"sort"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// reconciler owns the run state machines (DESIGN.md §4): it follows the
// store's change feed, moves runs through their states, retries and
// requeues them, enforces their policies (durations, schedules,
// utilization and inactivity: reconcile_policies.go) and a multi-node
// run's start order (reconcile_multinode.go).
type reconciler struct{ *Server }

// feedLoop turns committed changes into work: the scheduler is woken by
// jobs, queues and instances; each changed job is acted on (dispatch, stop)
// and its run reconciled. A lagged feed resyncs everything.
func (s *reconciler) feedLoop(ctx context.Context) {
	sub := s.store.Subscribe("", store.KindJob, store.KindRun, store.KindQueue, store.KindInstance)
	defer sub.Close()
	tick := time.NewTicker(s.opts.ResyncInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.resync(ctx)
		case ch, ok := <-sub.C:
			if !ok {
				return
			}
			if ch.Lagged {
				s.resync(ctx)
				continue
			}
			if ch.Deleted {
				s.specs.forget(ch.Kind, ch.Record.ID)
			}
			switch ch.Kind {
			case store.KindJob:
				if !ch.Deleted && ch.Record.Status == store.JobRunning {
					s.startWaiting(ch.Record.Run)
				}
				if !ch.Deleted {
					s.actOnJob(ch.Record)
					s.reconcileRun(ctx, ch.Record.Run)
				}
				if ch.Deleted || ch.Record.Status == store.JobSubmitted || finishedJob(ch.Record.Status) || ch.Record.Status == store.JobTerminating {
					kick(s.schedWake)
				}
			case store.KindRun:
				if !ch.Deleted {
					s.reconcileRun(ctx, ch.Record.ID)
				}
			default:
				kick(s.schedWake)
			}
		}
	}
}

// resync is the safety net: every active job and run is looked at again.
func (s *reconciler) resync(ctx context.Context) {
	for _, status := range []string{store.JobProvisioning, store.JobPulling, store.JobRunning, store.JobTerminating} {
		for _, j := range s.store.Jobs().ByStatus(status) {
			s.actOnJob(j)
		}
	}
	for _, status := range []string{store.RunSubmitted, store.RunPending, store.RunProvisioning, store.RunRunning, store.RunTerminating} {
		for _, r := range s.store.Runs().ByStatus(status) {
			s.reconcileRun(ctx, r.ID)
		}
	}
	kick(s.schedWake)
}

// actOnJob starts the goroutine a job's status calls for.
func (s *reconciler) actOnJob(j store.Record) {
	switch j.Status {
	case store.JobProvisioning:
		s.dispatcher.dispatch(j.ID)
	case store.JobPulling, store.JobRunning:
		if l := s.agents.get(j.Instance); l != nil && l.client != nil && !s.working.held("dispatch/"+j.ID) {
			s.dispatcher.watch(j.ID, l)
		}
	case store.JobTerminating:
		s.dispatcher.stopJob(j.ID)
	}
}

// reconcileRun derives a run's status from its current attempt's jobs and
// applies the run's policies: stop, retry, requeue after eviction,
// max_duration.
func (s *reconciler) reconcileRun(ctx context.Context, id string) {
	for attempt := range 10 {
		if attempt > 0 {
			conflictPause(attempt)
		}
		run, err := s.store.Runs().Get(id)
		if err != nil || finishedRun(run.Status) {
			return
		}
		muts, err := s.runTransition(run, s.now())
		if err != nil {
			// A corrupt record of the run or of its current jobs: the run
			// cannot go on; it stays as it is and the log says which.
			s.log.Error().Err(err).Str("run", run.ID).Str("project", run.Project).Msg("reconcile run: a record does not decode; the run is left as it is")
			return
		}
		if len(muts) == 0 {
			return
		}
		if _, err := s.store.Apply(ctx, muts...); err == nil || ctx.Err() != nil {
			return
		}
	}
}

// runTransition computes the mutations that bring run up to date. A
// record of the run or of one of its jobs that does not decode is an
// error: the run's state cannot be derived from it.
func (s *reconciler) runTransition(run store.Record, now time.Time) ([]store.Mutation, error) {
	st, err := runSpecOf(run)
	if err != nil {
		return nil, err
	}
	startedAt := st.StartedAt
	var jobs []store.Record
	var specs []jobRecordSpec
	all := s.store.Jobs().ByRun(run.ID)
	sort.Slice(all, func(a, b int) bool { return all[a].ID < all[b].ID })
	for _, j := range all {
		js, err := s.jobSpec(j)
		if err != nil {
			return nil, err
		}
		if js.Attempt == st.Attempt {
			jobs, specs = append(jobs, j), append(specs, js)
		}
	}
	counts := map[string]int{}
	evicted, evictedWhy, why := false, "", ""
	var failed, interrupted *store.Record
	var notBefore time.Time
	for i, j := range jobs {
		counts[j.Status]++
		js := specs[i]
		if js.Evicted && finishedJob(j.Status) && !evicted {
			evicted, evictedWhy = true, j.Reason
		}
		if j.Status == store.JobFailed && js.Interrupted && interrupted == nil {
			interrupted = &jobs[i]
		} else if j.Status == store.JobFailed && failed == nil {
			failed = &jobs[i]
		}
		notBefore = later(notBefore, js.NotBefore)
		if why == "" {
			why = js.WhyPending
		}
	}
	final := 0
	for _, s := range []string{store.JobDone, store.JobFailed, store.JobTerminated, store.JobAborted} {
		final += counts[s]
	}
	if final < len(jobs) {
		if muts, err := s.masterDone(run, st, jobs, specs); muts != nil || err != nil {
			return muts, err
		}
	}
	status, reason := run.Status, run.Reason
	switch {
	case scaledToZero(st) && final == len(jobs):
		// A service scaled to zero waits, running, for its next request.
		status = store.RunRunning
	case len(jobs) > 0 && final == len(jobs):
		switch {
		case st.StopCriteria == api.StopMasterDone && !st.Stop:
			// jobs are sorted by id, which ends in replica and rank: the
			// master is the first job.
			status, reason = store.RunDone, "the master node exited with code 0 (stop_criteria: master-done)"
			if jobs[0].Status != store.JobDone {
				status, reason = store.RunFailed, "the master node "+jobs[0].Reason
			}
		case st.Stop:
			status = store.RunTerminated
		case evicted:
			return s.requeue(run, st, jobs, takenBackReason+evictedWhy+")") // (reason_names.go)
		case interrupted != nil:
			ev := "interruption"
			if !st.hasEvent(ev) && hostLost(interrupted.Reason) {
				ev = "error" // a lost host is an error too
			}
			at, ended, ok := planRetry(&st, ev, now)
			if ok {
				return s.retryAt(run, st, jobs, at, now, "an interruption (job "+interrupted.Name+" "+interrupted.Reason+")")
			}
			status, reason = store.RunFailed, failedReason("interrupted: job "+interrupted.Name+" "+interrupted.Reason, ended)
		case failed != nil:
			at, ended, ok := planRetry(&st, "error", now)
			if ok {
				return s.retryAt(run, st, jobs, at, now, "an error (job "+failed.Name+" "+failed.Reason+")")
			}
			status, reason = store.RunFailed, failedReason("job "+failed.Name+" "+failed.Reason, ended)
		case counts[store.JobDone] == len(jobs):
			status, reason = store.RunDone, "all jobs exited with code 0"
		default:
			status = store.RunTerminated
			if reason == "" {
				reason = jobs[0].Reason
			}
		}
		if len(st.Cron) > 0 && !st.Stop {
			return s.requeueAtTick(run, st, jobs, "the last attempt ended "+status)
		}
		st.FinishedAt = now
		st.ExitCode = specs[0].ExitCode
	case st.Stop:
		status = store.RunTerminating
	case counts[store.JobRunning] > 0 && counts[store.JobRunning]+final == len(jobs):
		status = store.RunRunning
		if st.StartedAt.IsZero() {
			st.StartedAt = now
			reason = "running"
		}
		if st.MaxDuration > 0 {
			left := st.StartedAt.Add(st.MaxDuration).Sub(now)
			if left <= 0 {
				return s.stopMutations(run, false, fmt.Sprintf("max_duration %s exceeded", st.MaxDuration))
			}
			s.wakeRunAt(run.ID, "max_duration", left)
		}
		if st.UtilWindow > 0 {
			s.watchUtilization(run.ID, st.MinGPUUtil, st.UtilWindow)
		}
		if st.Inactivity > 0 {
			s.watchInactivity(run.ID, st.Inactivity)
		}
	case st.Type == api.KindService && run.Status == store.RunRunning && !st.Stop:
		// A running service stays running while replicas come and go
		// (autoscaling, a rolling update: autoscale.go, rollout.go).
	case counts[store.JobProvisioning]+counts[store.JobPulling]+counts[store.JobRunning] > 0:
		status, reason = store.RunProvisioning, "starting on its hosts"
		if w := backendWaitReason(jobs); w != "" {
			reason = w // a backend's queue (backend_waiting.go)
		}
	case counts[store.JobSubmitted] == len(jobs) && len(jobs) > 0 && notBefore.After(s.clock().Now()):
		status, reason = store.RunPending, "scheduled: next start at "+notBefore.Format(time.RFC3339)
		if st.RetryAt.Equal(notBefore) {
			reason = run.Reason // a retry's backoff: its reason names the attempt, its start and the failure
		}
		s.wakeAtTick(run.ID, notBefore)
	case counts[store.JobSubmitted] > 0 && why != "":
		if deadline, ok := noCapacityDeadline(st, jobs, specs); ok {
			if !now.Before(deadline) {
				return s.failNoCapacity(run, st, jobs, why, now)
			}
			s.wakeRunAt(run.ID, "no-capacity", deadline.Sub(now))
		}
		status, reason = store.RunPending, why
	}
	if status == run.Status && reason == run.Reason && st.StartedAt.Equal(startedAt) {
		return nil, nil
	}
	changed := status != run.Status
	run.Status, run.Reason, run.Spec = status, reason, encodeSpec(st)
	muts := []store.Mutation{store.Update(run)}
	if changed {
		muts = append(muts, s.event(run.Project, store.KindRun, run.ID, status, reason))
	}
	return muts, nil
}

// requeue starts a new attempt of the run: fresh jobs (status submitted)
// with the same specs; the old attempt's jobs stay as history.
func (s *reconciler) requeue(run store.Record, st runState, jobs []store.Record, reason string) ([]store.Mutation, error) {
	return s.requeueWith(run, st, jobs, reason, time.Time{})
}

// requeueWith is requeue whose new jobs wait for notBefore (a cron tick;
// zero: none).
func (s *reconciler) requeueWith(run store.Record, st runState, jobs []store.Record, reason string, notBefore time.Time) ([]store.Mutation, error) {
	st.Attempt++
	st.StartedAt = time.Time{}
	run.Status, run.Reason, run.Spec = store.RunSubmitted, reason, encodeSpec(st)
	muts := []store.Mutation{store.Update(run), s.event(run.Project, store.KindRun, run.ID, run.Status, reason)}
	now := s.now()
	for _, j := range jobs {
		js, err := jobSpecOf(j)
		if err != nil {
			return nil, err
		}
		if js.Retired {
			continue // a replica scaled down or replaced stays stopped
		}
		nj := store.Record{Kind: store.KindJob, Project: j.Project, Run: j.Run, Name: j.Name, Queue: j.Queue, User: j.User, Sealed: j.Sealed,
			Status: store.JobSubmitted, Reason: reason}
		nj.ID = fmt.Sprintf("%s-%d-%d-a%d", run.ID, js.ReplicaNum, js.NodeRank, st.Attempt)
		js.Spec.ID, js.Attempt, js.Devices, js.ExitCode, js.Evicted = nj.ID, st.Attempt, nil, nil, false
		js.Ports, js.StartedAt, js.FinishedAt, js.BoundAt, js.SubmittedAt, js.WhyPending = nil, time.Time{}, time.Time{}, time.Time{}, now, ""
		js.Interrupted, js.NotBefore = false, notBefore
		nj.Spec = encodeSpec(js)
		muts = append(muts, store.Create(nj))
	}
	return muts, nil
}

// wakeRunAt reconciles the run again after d, once per run and purpose
// (max_duration, no-capacity).
func (s *reconciler) wakeRunAt(id, purpose string, d time.Duration) {
	key := "timer/" + purpose + "/" + id
	if !s.working.claim(key) {
		return
	}
	s.clock().AfterFunc(d, func() {
		s.working.release(key)
		if s.ctx.Err() == nil {
			s.reconcileRun(s.ctx, id)
		}
	})
}

// adoptJobs reconciles the store with what each agent has, at start: jobs
// the agent still has are adopted (adoptAgentJob: watched again, or
// stopped when the store has finished them or never knew them), bound jobs
// it never started are dispatched again, running jobs it no longer has
// fail with a reason.
func (s *reconciler) adoptJobs(ctx context.Context) {
	for _, l := range s.agents.all() {
		if l.client == nil {
			continue
		}
		have, err := l.client.List(ctx)
		if err != nil {
			s.log.Warn().Err(err).Str("instance", l.instance).Msg("list agent jobs")
			continue
		}
		onAgent := map[string]bool{}
		for _, st := range have {
			onAgent[st.ID] = true
			s.hosts.adoptAgentJob(ctx, l, st)
		}
		for _, j := range s.store.Jobs().ByInstance(l.instance) {
			if onAgent[j.ID] || !activeJob(j.Status) {
				continue
			}
			switch j.Status {
			case store.JobProvisioning, store.JobPulling:
				err := s.updateJob(ctx, j.ID, func(j *store.Record, _ *jobRecordSpec) (bool, []store.Mutation) {
					j.Status = store.JobProvisioning
					return true, nil
				})
				if err != nil {
					s.logJobUpdate(err, j, "adopt: dispatch a job its agent never started")
					continue
				}
				s.dispatcher.dispatch(j.ID)
			case store.JobTerminating:
				s.dispatcher.endStopped(ctx, j.ID, "the agent no longer had it")
			default:
				s.dispatcher.interruptJob(ctx, j.ID, "the agent no longer has the job (lost while the server was down)")
			}
		}
	}
}

// stopMutations moves a run to terminating: jobs not yet on a host end at
// once, bound ones become terminating and the dispatcher stops them. A
// corrupt record of the run or of a job to stop is an error: stopping it
// would rewrite it from a zero spec.
func (s *reconciler) stopMutations(run store.Record, abort bool, reason string) ([]store.Mutation, error) {
	st, err := runSpecOf(run)
	if err != nil {
		return nil, err
	}
	st.Stop, st.Abort = true, abort
	run.Spec = encodeSpec(st)
	run.Status, run.Reason = store.RunTerminating, reason
	muts := []store.Mutation{store.Update(run), s.event(run.Project, store.KindRun, run.ID, run.Status, reason)}
	now := s.now()
	for _, j := range s.store.Jobs().ByRun(run.ID) {
		if finishedJob(j.Status) || j.Status == store.JobTerminating && !abort {
			continue
		}
		js, err := jobSpecOf(j)
		if err != nil {
			return nil, err
		}
		js.Abort = abort
		if j.Instance == "" {
			j.Status = store.JobTerminated
			if abort {
				j.Status = store.JobAborted
			}
			js.FinishedAt = now
		} else {
			j.Status = store.JobTerminating
		}
		js.WhyPending = ""
		j.Reason = reason
		j.Spec = encodeSpec(js)
		muts = append(muts, store.Update(j))
	}
	return muts, nil
}
