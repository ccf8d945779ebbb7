package agent

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/agent/state"
	"gpud.dev/gpud/api"
)

// Get returns the job's status.
func (a *Agent) Get(id string) (api.JobStatus, error) {
	j, err := a.get(id)
	if err != nil {
		return api.JobStatus{}, err
	}
	return a.status(j), nil
}

// Spec returns what the agent keeps of the job's spec: state.Redact's
// fields, without environment, commands or credentials.
func (a *Agent) Spec(id string) (api.JobSpec, error) {
	j, err := a.get(id)
	if err != nil {
		return api.JobSpec{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return state.Redact(j.rec.Spec), nil
}

// List returns every job's status, oldest first.
func (a *Agent) List() []api.JobStatus {
	a.mu.Lock()
	out := make([]api.JobStatus, 0, len(a.jobs))
	for _, j := range a.jobs {
		st := j.rec.Status
		st.Sessions = a.sessions.of(st.ID)
		out = append(out, st)
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y api.JobStatus) int {
		if c := x.CreatedAt.Compare(y.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	return out
}

// Wait blocks until the job reaches a final state (or ctx ends) and
// returns its status then.
func (a *Agent) Wait(ctx context.Context, id string) (api.JobStatus, error) {
	j, err := a.get(id)
	if err != nil {
		return api.JobStatus{}, err
	}
	select {
	case <-j.done:
		return a.status(j), nil
	case <-ctx.Done():
		return a.status(j), ctx.Err()
	}
}

// Stop asks the job to end: SIGTERM, then SIGKILL after the spec's
// stop_duration. It records the request first (so the exit is reported as
// stopped even across an agent restart), returns the terminating status at
// once and finishes the stop in the background; use Wait for the end.
func (a *Agent) Stop(ctx context.Context, id string) (api.JobStatus, error) {
	j, err := a.get(id)
	if err != nil {
		return api.JobStatus{}, err
	}
	a.mu.Lock()
	if j.rec.Status.State.Finished() || j.rec.StopRequested {
		a.mu.Unlock()
		return a.status(j), nil
	}
	j.rec.StopRequested = true
	j.rec.Status.State = api.JobTerminating
	rec := j.rec
	a.mu.Unlock()
	if err := a.db.Put(rec); err != nil {
		return api.JobStatus{}, err
	}
	a.stopInBackground(id, rec.Handle, rec.Spec.StopDuration)
	return rec.Status, nil
}

// stopInBackground runs the runtime's stop (SIGTERM, grace, SIGKILL) in a
// goroutine the agent waits for on Close.
func (a *Agent) stopInBackground(id string, h runtime.Handle, grace time.Duration) {
	if grace <= 0 {
		grace = DefaultStopDuration
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := a.rt.Stop(a.ctx, h, grace); err != nil && a.ctx.Err() == nil {
			a.log.Error().Err(err).Str("job", id).Msg("stop job")
		}
	}()
}

// Remove deletes a finished job: its container or files, its logs and its
// record. A job that still runs must be stopped first.
func (a *Agent) Remove(ctx context.Context, id string) error {
	a.removeMu.Lock()
	defer a.removeMu.Unlock()
	j, err := a.get(id)
	if err != nil {
		return err
	}
	st := a.status(j)
	if !st.State.Finished() {
		return fmt.Errorf("%w: job %s is %s; stop it first", ErrInvalid, id, st.State)
	}
	a.mu.Lock()
	h, removed := j.rec.Handle, !j.rec.Removed.IsZero()
	a.mu.Unlock()
	if h.ID != "" && !removed {
		if err := a.rt.Remove(ctx, h); err != nil {
			return err
		}
	}
	if err := a.db.Delete(id); err != nil {
		return err
	}
	a.mu.Lock()
	delete(a.jobs, id)
	a.mu.Unlock()
	return nil
}

// Logs streams the job's output (see runtime.Runtime.Logs). A job whose
// output the retention removed (retention.go) has none left here: the
// server kept its copy.
func (a *Agent) Logs(ctx context.Context, id string, opts runtime.LogOptions, emit func(api.JobLogEntry) error) error {
	j, err := a.get(id)
	if err != nil {
		return err
	}
	a.mu.Lock()
	h, removed := j.rec.Handle, !j.rec.Removed.IsZero() || j.removing
	if h.ID == "" || removed {
		a.mu.Unlock()
		return nil // never started, or removed: no output here
	}
	j.readers++ // the reaper waits for this reader to finish
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		j.readers--
		a.mu.Unlock()
	}()
	return a.rt.Logs(ctx, h, opts, emit)
}

// Metrics samples the job's CPU and memory use and the load of its GPUs.
func (a *Agent) Metrics(ctx context.Context, id string) (api.JobMetrics, error) {
	j, err := a.get(id)
	if err != nil {
		return api.JobMetrics{}, err
	}
	a.mu.Lock()
	h, devices, running := j.rec.Handle, j.rec.Spec.GPUs.Devices, j.rec.Status.State == api.JobRunning || j.rec.Status.State == api.JobTerminating
	a.mu.Unlock()
	m := api.JobMetrics{ID: id, Time: time.Now().UTC()}
	if !running {
		return m, nil
	}
	u, err := a.rt.Usage(ctx, h)
	if err != nil {
		return api.JobMetrics{}, err
	}
	m.CPUSeconds, m.MemoryBytes, m.MemoryLimit = u.CPUSeconds, u.MemoryBytes, u.MemoryLimit
	a.mu.Lock()
	if prev := j.cpu; !prev.at.IsZero() && m.Time.After(prev.at) {
		m.CPUPercent = 100 * (u.CPUSeconds - prev.seconds) / m.Time.Sub(prev.at).Seconds()
	} else if !h.StartedAt.IsZero() && m.Time.After(h.StartedAt) {
		m.CPUPercent = 100 * u.CPUSeconds / m.Time.Sub(h.StartedAt).Seconds()
	}
	j.cpu = cpuSample{seconds: u.CPUSeconds, at: m.Time}
	a.mu.Unlock()
	if len(devices) > 0 && a.cfg.GPUs != nil {
		samples, err := a.cfg.GPUs.Sample(ctx)
		if err != nil {
			return api.JobMetrics{}, fmt.Errorf("job %s: gpu sample: %w", id, err)
		}
		m.GPUs = samplesFor(Samples(samples), devices)
	}
	return m, nil
}

// samplesFor keeps the samples of the devices a job was given (by index
// or UUID).
func samplesFor(samples []api.AcceleratorSample, devices []string) []api.AcceleratorSample {
	var out []api.AcceleratorSample
	for _, s := range samples {
		if slices.Contains(devices, strconv.Itoa(s.Index)) || (s.UUID != "" && slices.Contains(devices, s.UUID)) {
			out = append(out, s)
		}
	}
	return out
}

// adopt rebuilds the job table from the state file and the runtime.
func (a *Agent) adopt(ctx context.Context) error {
	recs, err := a.db.All()
	if err != nil {
		return err
	}
	found, err := a.rt.Adopt(ctx)
	if err != nil {
		return fmt.Errorf("agent: re-adopt jobs: %w", err)
	}
	byID := map[string]runtime.Found{}
	for _, f := range found {
		byID[f.Handle.JobID] = f
	}
	for _, rec := range recs {
		f, seen := byID[rec.Spec.ID]
		delete(byID, rec.Spec.ID)
		a.adoptOne(rec, f, seen)
	}
	// Jobs the runtime has but the state file lost (a deleted data dir).
	for id, f := range byID {
		rec := state.Record{Spec: api.JobSpec{ID: id, RunName: f.RunName}, Status: api.JobStatus{
			ID: id, RunName: f.RunName, Runtime: a.rt.Name(), State: api.JobRunning, CreatedAt: f.Handle.StartedAt,
		}}
		a.adoptOne(rec, f, true)
	}
	return nil
}

func (a *Agent) adoptOne(rec state.Record, f runtime.Found, seen bool) {
	j := &job{rec: rec, done: make(chan struct{})}
	a.mu.Lock()
	a.jobs[rec.Spec.ID] = j
	a.mu.Unlock()
	if rec.Status.State.Finished() {
		close(j.done)
		return
	}
	if seen {
		j.rec.Handle = f.Handle
		j.rec.Status.Handle = f.Handle.ID
		j.rec.Status.StartedAt = f.Handle.StartedAt
		if len(f.Handle.Ports) > 0 {
			j.rec.Status.Ports = f.Handle.Ports
		}
	}
	log := a.log.Info().Str("job", rec.Spec.ID).Str("run", rec.Spec.RunName)
	switch {
	case seen && f.Running:
		if j.rec.Status.State == api.JobPulling {
			j.rec.Status.State = api.JobRunning
		}
		if err := a.db.Put(j.rec); err != nil {
			a.log.Error().Err(err).Str("job", rec.Spec.ID).Msg("record adopted job")
		}
		log.Msg("re-adopted running job")
		a.watch(j)
		if rec.StopRequested {
			// The previous agent went down during a stop: finish it.
			a.stopInBackground(rec.Spec.ID, j.rec.Handle, rec.Spec.StopDuration)
		}
	case seen && !f.Lost:
		log.Int("exit_code", f.Exit.Code).Msg("job ended while the agent was down")
		a.finish(j, f.Exit, "", "", true)
	default:
		log.Msg("job vanished while the agent was down")
		a.finish(j, runtime.Exit{Code: -1, FinishedAt: time.Now()}, api.ExitLost,
			"the job ended while the agent was down and its exit status was not recorded", true)
	}
}
