package daemon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// The service loop (this file, probes.go, rollout.go) keeps each running
// service's replicas as its configuration asks: it probes replicas for
// readiness, scales replicas on the measured request rate (`replicas: a..b`
// with `scaling`), and moves a rolling update along.

// requestRates is where the autoscaler reads a service's request rate:
// the gateway's (its wiring calls setRequestRates). Rate is the recent
// rate of requests to the service keyed "project/run", in requests per
// second; the autoscaler averages it over the scaling window.
type requestRates interface{ Rate(key string) float64 }

// Defaults of `scaling`, as dstack's.
const (
	defaultScaleUpDelay   = 5 * time.Minute
	defaultScaleDownDelay = 10 * time.Minute
	defaultScalingWindow  = time.Minute
	// gatewayRateWindow is the window of the gateway's Rate: short, so
	// that a service's scaling.window (the autoscaler's mean of its
	// samples) is what smooths the rate.
	gatewayRateWindow = 5 * time.Second
	// serviceTick paces the service loop: samples of the rate, scaling
	// decisions and rollout steps.
	serviceTick = 250 * time.Millisecond
	// defaultRolloutTimeout bounds how long a rolling update waits for
	// its new replicas to be ready (Options.RolloutTimeout).
	defaultRolloutTimeout = 15 * time.Minute
)

// serviceRunState is what a service run keeps of its replicas, beside
// its configuration: the replica count the autoscaler chose (so a restart
// keeps it), when it last scaled, the deployment its replicas run, and a
// rolling update in progress.
type serviceRunState struct {
	// Replicas is the replica count of the current deployment; Scaled
	// says the autoscaler set it (before, the count is the configuration's
	// minimum that the run started with).
	Replicas    int       `json:"replicas"`
	Scaled      bool      `json:"scaled,omitempty"`
	LastScaleAt time.Time `json:"last_scale_at,omitzero"`
	// Deployment numbers the configurations the service ran: a rolling
	// update starts Deployment+1.
	Deployment int           `json:"deployment,omitempty"`
	Rollout    *rolloutState `json:"rollout,omitempty"`
}

// services is the service loop's memory: the rate samples of each
// autoscaled service and the probers of each replica. It is rebuilt after
// a restart (a replica with probes is ready again once they pass).
type services struct {
	mu      sync.Mutex
	rates   requestRates
	samples map[string][]rateSample // run id -> samples within its window
	probes  map[string]*replicaProbe
	configs map[string]cachedConfig // run id -> its parsed configuration
}

type cachedConfig struct {
	version uint64
	cfg     *api.Config
}

// parsedServiceConfig is run's configuration, parsed once per run version.
func (s *Server) parsedServiceConfig(run store.Record, st runState) (*api.Config, error) {
	s.svc.mu.Lock()
	c, ok := s.svc.configs[run.ID]
	s.svc.mu.Unlock()
	if ok && c.version == run.Version {
		return c.cfg, nil
	}
	cfg, err := api.Parse("", st.Config)
	if err != nil {
		return nil, &corruptRecordError{Kind: run.Kind, ID: run.ID, Part: "spec", Err: err}
	}
	s.svc.mu.Lock()
	if s.svc.configs == nil {
		s.svc.configs = map[string]cachedConfig{}
	}
	s.svc.configs[run.ID] = cachedConfig{version: run.Version, cfg: cfg}
	s.svc.mu.Unlock()
	return cfg, nil
}

type rateSample struct {
	at   time.Time
	rate float64
}

// setRequestRates makes r the autoscaler's source of request rates (the
// gateway's wiring calls it).
func (s *Server) setRequestRates(r requestRates) {
	s.svc.mu.Lock()
	s.svc.rates = r
	s.svc.mu.Unlock()
}

func (s *Server) requestRates() requestRates {
	s.svc.mu.Lock()
	defer s.svc.mu.Unlock()
	if s.svc.rates != nil {
		return s.svc.rates
	}
	return noRates{}
}

// noRates is the rate source before the gateway sets its own: no
// requests.
type noRates struct{}

func (noRates) Rate(string) float64 { return 0 }

// serviceLoop runs the service loop until ctx ends.
func (s *Server) serviceLoop(ctx context.Context) {
	tick := time.NewTicker(serviceTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			s.stopProbes()
			return
		case <-tick.C:
		}
		live := map[string]bool{}
		for _, status := range []string{store.RunProvisioning, store.RunRunning} {
			for _, run := range s.store.Runs().ByStatus(status) {
				live[run.ID] = true
				if err := s.tendService(ctx, run); err != nil && ctx.Err() == nil && !errors.Is(err, store.ErrConflict) {
					s.log.Error().Err(err).Str("run", run.ID).Str("project", run.Project).Msg("service loop")
				}
			}
		}
		s.forgetServices(live)
	}
}

// serviceView is one service run as the service loop sees it: its
// configuration and its current attempt's replicas.
type serviceView struct {
	run   store.Record
	st    runState
	sv    *api.ServiceSpec
	jobs  []store.Record
	specs []jobRecordSpec
}

// serviceOf reads run as a service; ok false for another kind of run.
func (s *Server) serviceOf(run store.Record) (v serviceView, ok bool, err error) {
	st, err := s.runSpec(run)
	if err != nil || st.Type != api.KindService {
		return v, false, err
	}
	cfg, err := s.parsedServiceConfig(run, st)
	if err != nil || cfg.Service == nil {
		return v, false, err
	}
	v = serviceView{run: run, st: st, sv: cfg.Service}
	all := s.store.Jobs().ByRun(run.ID)
	sort.Slice(all, func(a, b int) bool { return all[a].ID < all[b].ID })
	for _, j := range all {
		js, err := s.jobSpec(j)
		if err != nil {
			return v, false, err
		}
		if js.Attempt == st.Attempt {
			v.jobs, v.specs = append(v.jobs, j), append(v.specs, js)
		}
	}
	return v, true, nil
}

// deployment is the service's current deployment number.
func (v serviceView) deployment() int {
	if v.st.Service == nil {
		return 0
	}
	return v.st.Service.Deployment
}

// active lists the replicas of deployment d that are neither retired nor
// finished.
func (v serviceView) active(d int) []int {
	var out []int
	for i, j := range v.jobs {
		if v.specs[i].Deployment == d && !v.specs[i].Retired && !finishedJob(j.Status) && j.Status != store.JobTerminating {
			out = append(out, i)
		}
	}
	return out
}

// tendService is one step of the service loop for run.
func (s *Server) tendService(ctx context.Context, run store.Record) error {
	v, ok, err := s.serviceOf(run)
	if err != nil || !ok {
		return err
	}
	s.syncProbes(v)
	s.syncRouterWorkers(v)
	if v.st.Stop {
		return nil
	}
	if v.st.Service != nil && v.st.Service.Rollout != nil {
		return s.stepRollout(ctx, v)
	}
	return s.autoscale(ctx, v)
}

// scalingOf is a service's autoscaling rules with their defaults, and
// its replica bounds; ok false for a service without them.
func scalingOf(sv *api.ServiceSpec) (sc api.Scaling, lo, hi int, ok bool) {
	if sv.Scaling == nil || len(sv.Replicas.Groups) > 0 || sv.Replicas.Count.Max == nil {
		return sc, 0, 0, false
	}
	sc = *sv.Scaling
	lo, hi = rangeMin(sv.Replicas.Count), *sv.Replicas.Count.Max
	return sc, lo, hi, true
}

func durationOr(d *api.Duration, def time.Duration) time.Duration {
	if d == nil || d.Off {
		return def
	}
	return d.Value
}

// desiredReplicas is the replica count for rate: ceil(rate/target),
// within [lo, hi].
func desiredReplicas(rate, target float64, lo, hi int) int {
	n := 0
	if rate > 0 && target > 0 {
		n = int(math.Ceil(rate/target - 1e-9))
	}
	return min(max(n, lo), hi)
}

// autoscale samples the service's request rate and, once the delay since
// the last scaling has passed, scales it to ceil(rate/target) replicas
// within its bounds (as dstack's RPS autoscaler: scale_up_delay and
// scale_down_delay count from the last scaling event, or the start). A
// replica that ended on its own counts as missing: it is replaced.
func (s *Server) autoscale(ctx context.Context, v serviceView) error {
	sc, lo, hi, ok := scalingOf(v.sv)
	if !ok || v.run.Status != store.RunRunning {
		return nil
	}
	now := s.now()
	window := durationOr(sc.Window, defaultScalingWindow)
	rate := s.sampleRate(v.run, window, now)
	// current counts the replicas there are: one that ended on its own
	// is replaced like a scale-up, after scale_up_delay.
	current := len(v.active(v.deployment()))
	last := v.st.StartedAt
	if v.st.Service != nil && v.st.Service.Scaled {
		last = v.st.Service.LastScaleAt
	}
	want := desiredReplicas(rate, sc.Target, lo, hi)
	var delay time.Duration
	switch {
	case want > current:
		delay = durationOr(sc.ScaleUpDelay, defaultScaleUpDelay)
	case want < current:
		delay = durationOr(sc.ScaleDownDelay, defaultScaleDownDelay)
	default:
		return nil
	}
	if now.Sub(last) < delay {
		return nil
	}
	why := fmt.Sprintf("autoscaled from %d to %d replicas: %.2f requests/s over %s, target %g per replica", current, want, rate, window, sc.Target)
	if want == 0 {
		why = fmt.Sprintf("scaled to zero: %.2f requests/s over %s; the next request starts a replica", rate, window)
	}
	return s.scaleService(ctx, v.run.ID, func(int) (int, bool) { return want, true }, why)
}

// sampleRate records the service's current request rate and returns its
// mean over the window.
func (s *Server) sampleRate(run store.Record, window time.Duration, now time.Time) float64 {
	r := s.requestRates().Rate(run.Project + "/" + run.Name)
	s.svc.mu.Lock()
	defer s.svc.mu.Unlock()
	if s.svc.samples == nil {
		s.svc.samples = map[string][]rateSample{}
	}
	ss := append(s.svc.samples[run.ID], rateSample{at: now, rate: r})
	for len(ss) > 0 && now.Sub(ss[0].at) > window {
		ss = ss[1:]
	}
	s.svc.samples[run.ID] = ss
	sum := 0.0
	for _, x := range ss {
		sum += x.rate
	}
	return sum / float64(len(ss))
}

// forgetServices drops the memory of runs no longer live.
func (s *Server) forgetServices(live map[string]bool) {
	s.svc.mu.Lock()
	for id := range s.svc.samples {
		if !live[id] {
			delete(s.svc.samples, id)
		}
	}
	for id := range s.svc.configs {
		if !live[id] {
			delete(s.svc.configs, id)
		}
	}
	s.svc.mu.Unlock()
}

// scaleFromZero asks for one replica of a service that has none (a
// service with replicas 0..n that has scaled to zero) and returns without
// waiting for it; the gateway waits for the replica to become ready.
func (s *Server) scaleFromZero(ctx context.Context, project, run string) error {
	r, err := s.runsAPI.findRun(project, run)
	if err != nil {
		return err
	}
	v, ok, err := s.serviceOf(r)
	if err != nil {
		return err
	}
	if !ok || finishedRun(r.Status) || v.st.Stop {
		return fmt.Errorf("run %s/%s is not an active service", project, run)
	}
	if _, _, _, ok := scalingOf(v.sv); !ok {
		return nil // a fixed number of replicas: nothing to wake
	}
	return s.scaleService(ctx, r.ID, func(current int) (int, bool) { return 1, current == 0 },
		"scaled from zero to 1 replica: a request arrived")
}

// scaleService sets the replica count of the service's current
// deployment to what want says (given the count of its active replicas;
// false: leave it), starting replicas (copies of the deployment's latest)
// or retiring them (those not yet running first, the highest replica
// numbers first), and records why as an event of the run.
func (s *Server) scaleService(ctx context.Context, runID string, want func(current int) (int, bool), why string) error {
	for attempt := range 10 {
		if attempt > 0 {
			conflictPause(attempt)
		}
		run, err := s.store.Runs().Get(runID)
		if err != nil {
			return err
		}
		v, ok, err := s.serviceOf(run)
		if err != nil || !ok || finishedRun(run.Status) || v.st.Stop {
			return err
		}
		if v.st.Service != nil && v.st.Service.Rollout != nil {
			return nil // a rolling update sets the count when it ends
		}
		d := v.deployment()
		active := v.active(d)
		n, ok := want(len(active))
		if !ok {
			return nil
		}
		st, err := runSpecOf(run)
		if err != nil {
			return err
		}
		if st.Service == nil {
			st.Service = &serviceRunState{}
		}
		now := s.now()
		st.Service.Replicas, st.Service.Scaled, st.Service.LastScaleAt = n, true, now
		var muts []store.Mutation
		switch {
		case n > len(active):
			created, err := s.newReplicas(v, d, n-len(active), why)
			if err != nil {
				return err
			}
			muts = append(muts, created...)
		case n < len(active):
			retire := retireOrder(v, active)[:len(active)-n]
			for _, i := range retire {
				muts = append(muts, s.retireReplica(v.jobs[i], why, now)...)
			}
		}
		run.Spec = encodeSpec(st)
		run.Reason = "running"
		if n == 0 {
			run.Reason = why
		}
		muts = append(muts, store.Update(run), s.event(run.Project, store.KindRun, run.ID, run.Status, why))
		if _, err = s.store.Apply(ctx, muts...); err == nil {
			kick(s.schedWake)
			return nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("run %s: too many concurrent updates", runID)
}

// retireOrder sorts active replicas for retiring: not yet running first,
// then by descending replica number.
func retireOrder(v serviceView, active []int) []int {
	out := append([]int(nil), active...)
	sort.SliceStable(out, func(a, b int) bool {
		ra, rb := v.jobs[out[a]].Status == store.JobRunning, v.jobs[out[b]].Status == store.JobRunning
		if ra != rb {
			return !ra
		}
		return v.specs[out[a]].ReplicaNum > v.specs[out[b]].ReplicaNum
	})
	return out
}

// retireReplica stops a replica for good (scaled down or replaced): one
// not yet on a host ends at once, a placed one is stopped by the
// dispatcher with its grace period.
func (s *Server) retireReplica(j store.Record, why string, now time.Time) []store.Mutation {
	js, err := jobSpecOf(j)
	if err != nil {
		return nil // a corrupt job is left as it is (logged by the loop's reads)
	}
	js.Retired, js.WhyPending = true, ""
	if j.Instance == "" {
		j.Status, js.FinishedAt = store.JobTerminated, now
	} else {
		j.Status = store.JobTerminating
	}
	j.Reason, j.Spec = why, encodeSpec(js)
	return []store.Mutation{store.Update(j), s.event(j.Project, store.KindJob, j.ID, j.Status, why)}
}

// newReplicas creates n replicas of deployment d, copies of its
// latest replica (spec and sealed environment) with the next replica
// numbers.
func (s *Server) newReplicas(v serviceView, d, n int, why string) ([]store.Mutation, error) {
	tmpl := -1
	next := 0
	for _, j := range s.store.Jobs().ByRun(v.run.ID) {
		js, err := s.jobSpec(j)
		if err != nil {
			return nil, err
		}
		next = max(next, js.ReplicaNum+1)
	}
	for i := range v.jobs {
		if v.specs[i].Deployment == d && (tmpl < 0 || v.specs[i].ReplicaNum > v.specs[tmpl].ReplicaNum) {
			tmpl = i
		}
	}
	if tmpl < 0 {
		return nil, fmt.Errorf("run %s: no replica of deployment %d to copy", v.run.ID, d)
	}
	var muts []store.Mutation
	for k := range n {
		muts = append(muts, store.Create(s.copyReplica(v.jobs[tmpl], v.st.Attempt, d, next+k, why)))
	}
	return muts, nil
}

// copyReplica is a new replica (status submitted) of j's spec with
// replica number replica, in attempt and deployment d.
func (s *Server) copyReplica(j store.Record, attempt, d, replica int, why string) store.Record {
	js, _ := jobSpecOf(j) // callers read j through jobSpec already
	nj := store.Record{Kind: store.KindJob, Project: j.Project, Run: j.Run, Queue: j.Queue, User: j.User, Sealed: j.Sealed,
		Status: store.JobSubmitted, Reason: why}
	nj.ID = fmt.Sprintf("%s-%d-%d", j.Run, replica, js.NodeRank)
	if attempt > 0 {
		nj.ID += fmt.Sprintf("-a%d", attempt)
	}
	nj.Name = fmt.Sprintf("%s-%d-%d", js.Spec.RunName, replica, js.NodeRank)
	js.Spec.ID, js.ReplicaNum, js.Attempt, js.Deployment, js.Retired = nj.ID, replica, attempt, d, false
	js.Devices, js.ExitCode, js.Evicted, js.Abort, js.Interrupted = nil, nil, false, false, false
	js.Ports, js.StartedAt, js.FinishedAt, js.BoundAt, js.SubmittedAt, js.WhyPending = nil, time.Time{}, time.Time{}, time.Time{}, s.now(), ""
	js.NotBefore = time.Time{}
	nj.Spec = encodeSpec(js)
	return nj
}

// scaledToZero reports whether a service run has no replica by its
// autoscaler's choice: it stays running, waiting for a request.
func scaledToZero(st runState) bool {
	return st.Type == api.KindService && !st.Stop && st.Service != nil && st.Service.Scaled &&
		st.Service.Replicas == 0 && st.Service.Rollout == nil
}
