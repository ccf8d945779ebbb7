package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// rolloutState is a rolling update in progress: the service's new
// deployment (serviceRunState.Deployment) starts its replicas beside the
// old deployment's, which are retired one at a time once every new
// replica is ready; a new replica that ends, or new replicas not ready by
// Deadline, stop the update, retire the new replicas and restore Prev.
type rolloutState struct {
	From      int       `json:"from"`
	By        string    `json:"by"`
	StartedAt time.Time `json:"started_at"`
	Deadline  time.Time `json:"deadline"`
	// Prev is the run's state before the update, whose configuration a
	// failed update restores.
	Prev json.RawMessage `json:"prev"`
}

// takeConfig copies into dst what src's configuration decides: a rolling
// update applies all of it to the run (runtime facts stay dst's).
func takeConfig(dst *runState, src runState) {
	dst.Type, dst.Config, dst.Priority, dst.Preemptible = src.Type, src.Config, src.Priority, src.Preemptible
	dst.MinNodes, dst.RetryEvents, dst.RetryFor = src.MinNodes, src.RetryEvents, src.RetryFor
	dst.MaxDuration, dst.StopDuration = src.MaxDuration, src.StopDuration
	dst.MinGPUUtil, dst.UtilWindow, dst.Inactivity = src.MinGPUUtil, src.UtilWindow, src.Inactivity
	dst.Targets, dst.Place, dst.OpenService, dst.KeepPrefix = src.Targets, src.Place, src.OpenService, src.KeepPrefix
}

// rolloutSettle is how long a new replica without probes must have run
// before a rolling update counts it ready and retires an old one: one
// that crashes at start stops the update while the old replicas serve.
const rolloutSettle = 5 * time.Second

// rolloutReady says whether a new replica j of a rolling update is ready
// to take over: ready (replicaReady), and, without probes, running for
// rolloutSettle.
func (s *Server) rolloutReady(j store.Record, js jobRecordSpec) bool {
	if !s.replicaReady(j.ID) {
		return false
	}
	return len(js.Probes) > 0 || (!js.StartedAt.IsZero() && s.now().Sub(js.StartedAt) >= rolloutSettle)
}

// rolloutTimeout bounds how long new replicas may take to be ready.
func (s *Server) rolloutTimeout() time.Duration {
	if s.opts.RolloutTimeout > 0 {
		return s.opts.RolloutTimeout
	}
	return defaultRolloutTimeout
}

// rollingTarget finds the active service run that sub would update in
// place: a running service of the same name and queue; changed says
// whether sub changes its configuration. ok false: sub is no such update
// (the caller goes on as before: a conflict, or a replacement with
// force).
func (s *runsAPI) rollingTarget(sub *submission) (active store.Record, st runState, changed, ok bool, err error) {
	next, err := decodeSpec[runState](sub.run)
	if err != nil || next.Type != api.KindService || len(sub.jobs) == 0 {
		return active, st, false, false, err
	}
	for _, r := range s.store.Runs().ByProject(sub.run.Project) {
		if r.Name == sub.run.Name && !finishedRun(r.Status) {
			active = r
			ok = true
		}
	}
	if !ok || active.Status != store.RunRunning || active.Queue != sub.run.Queue {
		return active, st, false, false, nil
	}
	if st, err = runSpecOf(active); err != nil {
		return active, st, false, false, err
	}
	if st.Type != api.KindService || st.Stop {
		return active, st, false, false, nil
	}
	return active, st, !bytes.Equal(st.Config, next.Config), true, nil
}

// applyRollingUpdate starts a rolling update of the running service that
// sub changes (apply without force): replicas of the new configuration
// start beside the old ones, as many as the service runs now (within
// the new replica bounds), and the service loop (stepRollout) moves the
// update along. It returns false when sub is no such update.
func (s *runsAPI) applyRollingUpdate(sub *submission, user string, force bool) (store.Record, bool, error) {
	if force {
		return store.Record{}, false, nil
	}
	for attempt := range 10 {
		if attempt > 0 {
			conflictPause(attempt)
		}
		active, st, changed, ok, err := s.rollingTarget(sub)
		if err != nil || !ok {
			return store.Record{}, false, err
		}
		if st.Service != nil && st.Service.Rollout != nil {
			return store.Record{}, false, conflict("a rolling update of run %q is in progress (started %s by %s); wait for it to end, or apply with force to replace the run",
				active.Name, st.Service.Rollout.StartedAt.UTC().Format(time.RFC3339), st.Service.Rollout.By)
		}
		if !changed {
			return store.Record{}, false, nil // the same configuration: a conflict, as before
		}
		v, ok, err := s.serviceOf(active)
		if err != nil || !ok {
			return store.Record{}, false, err
		}
		next, err := decodeSpec[runState](sub.run)
		if err != nil {
			return store.Record{}, false, err
		}
		cfg, err := api.Parse("", next.Config)
		if err != nil {
			return store.Record{}, false, err
		}
		if len(v.sv.Replicas.Groups) > 0 || cfg.Service == nil || len(cfg.Service.Replicas.Groups) > 0 {
			return store.Record{}, false, apiErr(http.StatusConflict, api.CodeConflict, "replicas",
				"run %q is active, and a rolling update of a service with replica groups is not supported yet; apply with force to replace it", active.Name)
		}
		from := v.deployment()
		count := len(v.active(from))
		// The new deployment's number: past every one the run had,
		// failed updates included; and the next free replica numbers.
		to, next0 := from+1, 0
		for _, j := range s.store.Jobs().ByRun(active.ID) {
			js, err := s.jobSpec(j)
			if err != nil {
				return store.Record{}, false, err
			}
			to, next0 = max(to, js.Deployment+1), max(next0, js.ReplicaNum+1)
		}
		if r := cfg.Service.Replicas.Count; r.Min != nil && r.Max != nil {
			count = min(max(count, *r.Min), *r.Max)
		}
		now := s.now()
		nst := st
		takeConfig(&nst, next)
		svc := serviceRunState{}
		if st.Service != nil {
			svc = *st.Service
		}
		svc.Deployment, svc.Replicas = to, count
		svc.Rollout = &rolloutState{From: from, By: user, StartedAt: now, Deadline: now.Add(s.rolloutTimeout()), Prev: encodeSpec(st)}
		nst.Service = &svc
		reason := fmt.Sprintf("rolling update to deployment %d by %s: starting %d replicas of the new configuration", to, user, count)
		active.Spec, active.Reason = encodeSpec(nst), reason
		muts := []store.Mutation{store.Update(active), s.event(active.Project, store.KindRun, active.ID, active.Status, reason)}
		tmpl := sub.jobs[0]
		tmpl.Run = active.ID
		for k := range count {
			muts = append(muts, store.Create(s.copyReplica(tmpl, st.Attempt, to, next0+k, reason)))
		}
		_, err = s.store.Apply(s.ctx, muts...)
		if err == nil {
			kick(s.schedWake)
			run, err := s.store.Runs().Get(active.ID)
			return run, true, err
		}
		if !errors.Is(err, store.ErrConflict) {
			return store.Record{}, false, err
		}
	}
	return store.Record{}, false, conflict("the run keeps changing; try again")
}

// stepRollout moves a rolling update one step: it fails when a new
// replica ended or the new replicas are not all ready by the deadline;
// once all are ready it retires the old replicas one at a time (each
// leaves the gateway's replicas at once and is stopped with its grace
// period), and ends when none is left.
func (s *Server) stepRollout(ctx context.Context, v serviceView) error {
	ro, to := v.st.Service.Rollout, v.st.Service.Deployment
	var old []int
	failed, notReady, draining := "", "", false
	for i, j := range v.jobs {
		js := v.specs[i]
		switch {
		case js.Retired:
			draining = draining || !finishedJob(j.Status)
		case js.Deployment == to && finishedJob(j.Status):
			if failed == "" {
				failed = fmt.Sprintf("new replica %s ended (%s: %s)", j.Name, j.Status, j.Reason)
			}
		case js.Deployment == to && !s.rolloutReady(j, js):
			if notReady == "" {
				notReady = fmt.Sprintf("new replica %s is %s", j.Name, j.Status)
				if f := s.probeFailure(j.ID); f != "" {
					notReady += ", its last probe failed: " + f
				} else if j.Status == store.JobRunning && len(js.Probes) > 0 {
					notReady += ", its probes have not passed yet"
				} else if j.Status == store.JobRunning {
					notReady += fmt.Sprintf(", running for less than %s", rolloutSettle)
				}
			}
		case js.Deployment != to && !finishedJob(j.Status):
			old = append(old, i)
		}
	}
	now := s.now()
	switch {
	case failed != "":
		return s.endRollout(ctx, v.run.ID, ro, false, failed)
	case notReady != "" && now.After(ro.Deadline):
		return s.endRollout(ctx, v.run.ID, ro, false, fmt.Sprintf("the new replicas were not ready within %s (%s)", ro.Deadline.Sub(ro.StartedAt), notReady))
	case notReady != "", draining:
		return nil
	case len(old) > 0:
		i := retireOrder(v, old)[0]
		why := fmt.Sprintf("replaced by deployment %d (rolling update)", to)
		_, err := s.store.Apply(ctx, s.retireReplica(v.jobs[i], why, now)...)
		return err
	}
	return s.endRollout(ctx, v.run.ID, ro, true, "")
}

// endRollout ends the run's rolling update: done, or failed with why
// (its new replicas are retired and the previous configuration
// restored; the old replicas, never stopped, keep serving).
func (s *Server) endRollout(ctx context.Context, runID string, ro *rolloutState, ok bool, why string) error {
	for attempt := range 10 {
		if attempt > 0 {
			conflictPause(attempt)
		}
		run, err := s.store.Runs().Get(runID)
		if err != nil {
			return err
		}
		v, isSvc, err := s.serviceOf(run)
		if err != nil || !isSvc || v.st.Service == nil || v.st.Service.Rollout == nil || !v.st.Service.Rollout.StartedAt.Equal(ro.StartedAt) {
			return err
		}
		st, err := runSpecOf(run)
		if err != nil {
			return err
		}
		to := st.Service.Deployment
		var muts []store.Mutation
		var reason string
		if ok {
			st.Service.Rollout = nil
			st.Service.Replicas = len(v.active(to))
			reason = fmt.Sprintf("rolling update to deployment %d done: %d replicas of the new configuration serve", to, st.Service.Replicas)
		} else {
			reason = fmt.Sprintf("rolling update to deployment %d failed: %s; the previous configuration keeps serving", to, why)
			for _, i := range v.active(to) {
				muts = append(muts, s.retireReplica(v.jobs[i], reason, s.now())...)
			}
			prev, err := decodeSpec[runState](store.Record{Kind: store.KindRun, ID: run.ID, Spec: ro.Prev})
			if err != nil {
				return err
			}
			svc := *st.Service
			takeConfig(&st, prev)
			svc.Deployment, svc.Rollout = ro.From, nil
			svc.Replicas = len(v.active(ro.From))
			st.Service = &svc
		}
		run.Spec, run.Reason = encodeSpec(st), reason
		muts = append(muts, store.Update(run), s.event(run.Project, store.KindRun, run.ID, run.Status, reason))
		if _, err = s.store.Apply(ctx, muts...); !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("run %s: too many concurrent updates", runID)
}
