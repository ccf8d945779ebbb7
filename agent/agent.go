package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/agent/gpu"
	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/agent/state"
	"gpud.dev/gpud/api"
)

// DefaultStopDuration is the grace between SIGTERM and SIGKILL when a
// spec sets none.
const DefaultStopDuration = 10 * time.Second

// ErrNotFound is returned for a job id the agent does not know.
var ErrNotFound = errors.New("no such job")

// ErrInvalid wraps errors in a request the caller must fix.
var ErrInvalid = errors.New("invalid job")

var jobIDPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)

// Config wires an Agent.
type Config struct {
	// DataDir holds the state file (agent.db).
	DataDir string
	// Runtime runs the jobs; the Agent does not close it.
	Runtime runtime.Runtime
	// GPUs reads the host's accelerators; nil means none.
	GPUs gpu.Source
	// Docker describes the engine for host info.
	Docker api.DockerInfo
	// AllowPrivileged reports, in host info, that the runtime runs
	// privileged jobs (RunPolicy.PrivilegedAllowed); the runtime enforces it.
	AllowPrivileged bool
	// Volumes is what host paths jobs may mount (instance volumes); the
	// agent checks every job's against it at start and reports it.
	Volumes VolumePolicy
	// JobRetention is how long what a finished job leaves on the host (its
	// container, or its process-runtime files and output) stays before
	// the agent removes it (retention.go); zero is DefaultJobRetention.
	// The server keeps the job's logs in its own store, copied while the
	// job ran.
	JobRetention time.Duration
	// RecordRetention is how long the job's record (its final status)
	// stays after that removal; zero is DefaultRecordRetention.
	RecordRetention time.Duration
	Version         string
	Logger          zerolog.Logger
}

// Agent manages the jobs of one host: it starts them through the runtime,
// records every transition in the state file before reporting it (never
// a job's environment, commands or credentials: state.Redact), watches
// each running job for its exit (blocking on the runtime, never polling),
// and re-adopts jobs at start. All methods are safe for concurrent use.
type Agent struct {
	cfg Config
	rt  runtime.Runtime
	db  *state.DB
	log zerolog.Logger

	ctx    context.Context // cancelled by Close: stops watchers, not jobs
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	jobs map[string]*job

	sessions sessions // interactive sessions per job (exec.go)

	// reapWake wakes the reaper when a job finishes (retention.go);
	// removeMu keeps a removal by the API and one by the reaper apart.
	reapWake chan struct{}
	removeMu sync.Mutex
}

// job is the in-memory record of one job; changed only under Agent.mu.
type job struct {
	rec  state.Record
	done chan struct{} // closed when the job reaches a final state
	cpu  cpuSample     // previous CPU reading, for CPUPercent
	// readers counts the log streams open on the job: the reaper leaves
	// its output in place while one is read (the server's copy).
	readers int
	// removing is set while the reaper removes the job's output; a log
	// reader then finds none, as after the removal.
	removing bool
	// reapAfter postpones the reaper's next try after a failed removal.
	reapAfter time.Time
}

type cpuSample struct {
	seconds float64
	at      time.Time
}

// New opens the state file and re-adopts the jobs a previous agent process
// left: running ones are watched again, ended ones get their exit, and
// vanished ones are reported lost.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.Runtime == nil {
		return nil, errors.New("agent: a runtime is required")
	}
	// The data dir holds the token, the host key and the jobs' files: no
	// other user, a process job's included, may enter it, whatever mode an
	// existing one was made with.
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("agent: data dir: %w", err)
	}
	db, err := state.Open(filepath.Join(cfg.DataDir, "agent.db"))
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a := &Agent{cfg: cfg, rt: cfg.Runtime, db: db, log: cfg.Logger, ctx: actx, cancel: cancel, jobs: map[string]*job{},
		reapWake: make(chan struct{}, 1)}
	if err := a.adopt(ctx); err != nil {
		cancel()
		db.Close()
		return nil, err
	}
	a.startReaper()
	return a, nil
}

// Close stops watching jobs and closes the state file. Jobs keep running;
// the next agent re-adopts them.
func (a *Agent) Close() error {
	a.cancel()
	a.wg.Wait()
	return a.db.Close()
}

// RuntimeName is the name of the runtime jobs run in.
func (a *Agent) RuntimeName() string { return a.rt.Name() }

// Start validates spec, records it and starts it; it returns once the job
// runs (after a pull, if one was needed) or has failed to start. Starting
// an id that exists returns ErrInvalid.
func (a *Agent) Start(ctx context.Context, spec api.JobSpec) (api.JobStatus, error) {
	if !jobIDPattern.MatchString(spec.ID) {
		return api.JobStatus{}, fmt.Errorf("%w: id %q: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, spec.ID)
	}
	if spec.Upload != "" && !a.HasUpload(spec.Upload) {
		return api.JobStatus{}, fmt.Errorf("%w: upload %s (the run's repos and files) is not on this host; the server sends it before the start", ErrInvalid, spec.Upload)
	}
	j := &job{done: make(chan struct{}), rec: state.Record{Spec: spec, Status: api.JobStatus{
		ID: spec.ID, RunName: spec.RunName, Runtime: a.rt.Name(), State: api.JobPulling, CreatedAt: time.Now().UTC(),
	}}}
	a.mu.Lock()
	if _, ok := a.jobs[spec.ID]; ok {
		a.mu.Unlock()
		return api.JobStatus{}, fmt.Errorf("%w: job %s already exists", ErrInvalid, spec.ID)
	}
	a.jobs[spec.ID] = j
	a.mu.Unlock()
	// The job is first written once it runs (one fsync per start); if the
	// agent dies mid-start, Adopt still finds the container by its labels.
	// Instance volumes are the host admin's to allow: checked here, on
	// the host, whatever the server let through.
	// Repos given by URL are cloned here, into the job's upload.
	var h runtime.Handle
	started, err := a.withClones(ctx, spec)
	if err == nil {
		started, err = a.cfg.Volumes.Prepare(started, a.log)
	}
	if err == nil {
		started, err = a.prepareManaged(started)
	}
	if err == nil {
		h, err = a.rt.Start(ctx, started, func() { a.log.Info().Str("job", spec.ID).Str("image", spec.Image).Msg("pulling image") })
	}
	if err != nil {
		a.finish(j, runtime.Exit{Code: -1, FinishedAt: time.Now()}, api.ExitStartFailed, err.Error(), false)
		return a.status(j), err
	}
	a.mu.Lock()
	j.rec.Handle = h
	// A Stop that came while the runtime was starting had no handle to stop.
	stopped := j.rec.StopRequested
	j.rec.Status.State = api.JobRunning
	if stopped {
		j.rec.Status.State = api.JobTerminating
	}
	j.rec.Status.Handle = h.ID
	j.rec.Status.StartedAt = h.StartedAt
	j.rec.Status.Ports = h.Ports
	rec := j.rec
	a.mu.Unlock()
	if err := a.db.Put(rec); err != nil {
		a.log.Error().Err(err).Str("job", spec.ID).Msg("record running job")
	}
	a.log.Info().Str("job", spec.ID).Str("run", spec.RunName).Str("handle", h.ID).Msg("job running")
	a.watch(j)
	if stopped {
		a.stopInBackground(spec.ID, h, spec.StopDuration)
	}
	return rec.Status, nil
}

// watch waits, in its own goroutine, for the job's exit and records it.
func (a *Agent) watch(j *job) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.mu.Lock()
		h := j.rec.Handle
		a.mu.Unlock()
		backoff := api.Backoff{First: time.Second, Max: 30 * time.Second}
		for retry := 1; ; retry++ {
			exit, err := a.rt.Wait(a.ctx, h)
			switch {
			case a.ctx.Err() != nil:
				return // the agent is closing; the next one re-adopts the job
			case errors.Is(err, runtime.ErrExitUnknown):
				a.finish(j, runtime.Exit{Code: -1, FinishedAt: time.Now()}, api.ExitLost, err.Error(), false)
				return
			case err == nil:
				a.finish(j, exit, "", "", false)
				return
			}
			// The runtime is unreachable (an engine restart): the job may
			// well still run, so wait again instead of declaring it lost.
			a.log.Warn().Err(err).Str("job", h.JobID).Dur("retry_in", backoff.Delay(retry)).Msg("cannot watch job")
			if !backoff.Sleep(a.ctx, retry) {
				return
			}
		}
	}()
}

// finish records the job's final state. reason "" derives it from exit.
func (a *Agent) finish(j *job, exit runtime.Exit, reason api.ExitReason, msg string, whileDown bool) {
	a.mu.Lock()
	st := &j.rec.Status
	if st.State.Finished() {
		a.mu.Unlock()
		return
	}
	st.ExitCode, st.Signal, st.Message = exit.Code, exit.Signal, msg
	st.FinishedAt = exit.FinishedAt.UTC()
	st.EndedWhileAgentDown = whileDown
	st.Reason, st.State = classify(exit, reason, j.rec.StopRequested)
	// The job's resolved environment and commands (secrets) leave the
	// agent's memory with it; what is left is what the state file holds.
	j.rec.Spec = state.Redact(j.rec.Spec)
	rec := j.rec
	close(j.done)
	a.mu.Unlock()
	if err := a.db.Put(rec); err != nil {
		a.log.Error().Err(err).Str("job", rec.Spec.ID).Msg("record finished job")
	}
	a.wakeReaper()
	a.log.Info().Str("job", rec.Spec.ID).Str("state", string(st.State)).Str("reason", string(st.Reason)).Int("exit_code", st.ExitCode).Msg("job finished")
}

// classify is the one place that maps an exit to a state and a reason: a
// requested stop wins, then OOM, then a clean exit, then a signal.
func classify(exit runtime.Exit, reason api.ExitReason, stopRequested bool) (api.ExitReason, api.JobState) {
	switch {
	case reason != "":
		return reason, api.JobFailed
	case stopRequested:
		return api.ExitStopped, api.JobTerminated
	case exit.OOMKilled:
		return api.ExitOOMKilled, api.JobFailed
	case exit.Code == 0:
		return api.ExitExited, api.JobDone
	case exit.Signal != "":
		return api.ExitSignaled, api.JobFailed
	default:
		return api.ExitExited, api.JobFailed
	}
}

func (a *Agent) status(j *job) api.JobStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := j.rec.Status
	st.Ports = slices.Clone(st.Ports)
	st.Sessions = a.sessions.of(st.ID)
	return st
}

func (a *Agent) get(id string) (*job, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	j, ok := a.jobs[id]
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	return j, nil
}
