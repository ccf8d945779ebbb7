// Package runtime defines the one contract every job runtime of the agent
// fulfils (Runtime), and what they share: the job environment of DESIGN.md
// §5 (Environment), exit classification and log line handling.
//
// The implementations live in runtime/docker (containers through the Docker
// Engine API) and runtime/process (plain processes, no image). runtime must
// not import daemon, store, sched, plugins, proxy, nor the agent package.
package runtime

import (
	"context"
	"errors"
	"time"

	"gpud.dev/gpud/api"
)

// Handle identifies a started job inside its runtime. It is a plain value
// that the agent persists, so a later agent process can find the job again.
type Handle struct {
	JobID string `json:"job_id"`
	// ID is the container id (docker) or "<pid>:<start ticks>" (process).
	ID        string        `json:"id"`
	StartedAt time.Time     `json:"started_at"`
	Ports     []api.JobPort `json:"ports,omitempty"`
}

// Exit is how a job's main process ended, as the runtime saw it. The agent
// decides the reason (stopped on request beats signal, OOM beats both).
type Exit struct {
	Code int `json:"code"`
	// Signal is set when the process was killed by a signal ("SIGKILL").
	Signal     string    `json:"signal,omitempty"`
	OOMKilled  bool      `json:"oom_killed,omitempty"`
	FinishedAt time.Time `json:"finished_at"`
}

// Found is a job a runtime still knows about, from this or an earlier agent
// process: running, or finished with its exit.
type Found struct {
	Handle  Handle
	RunName string
	Running bool
	// Exit is valid when Running and Lost are false.
	Exit Exit
	// Lost means the job ended but its exit status is unknown.
	Lost bool
}

// LogOptions selects which output Logs returns.
type LogOptions struct {
	// Follow keeps streaming until the job ends or ctx is done.
	Follow bool
	// Since drops lines written before it; zero keeps all.
	Since  time.Time
	Stdout bool
	Stderr bool
}

// Usage is one reading of a job's resource use.
type Usage struct {
	CPUSeconds  float64
	MemoryBytes int64
	MemoryLimit int64
}

// Runtime runs jobs on this host. Every method is safe for concurrent use
// and takes the Handle that Start returned (or Adopt found).
type Runtime interface {
	// Name is "docker" or "process".
	Name() string
	// Start prepares and starts the job (pulling the image if it is
	// missing; pulling is called before a pull begins) and returns once its
	// main process runs. A failed Start leaves nothing behind to clean.
	Start(ctx context.Context, spec api.JobSpec, pulling func()) (Handle, error)
	// Wait blocks until the job's main process has ended and reports how.
	// It works for adopted jobs too, and returns at once for ended ones.
	Wait(ctx context.Context, h Handle) (Exit, error)
	// Stop sends SIGTERM to the job, waits up to grace for it to end, then
	// sends SIGKILL. It returns once the signals are sent; use Wait.
	Stop(ctx context.Context, h Handle, grace time.Duration) error
	// Logs calls emit with each output line, oldest first, in the order the
	// job wrote them. With Follow it returns when the job has ended and all
	// its output was emitted.
	Logs(ctx context.Context, h Handle, opts LogOptions, emit func(api.JobLogEntry) error) error
	// Usage reads the job's current CPU and memory use.
	Usage(ctx context.Context, h Handle) (Usage, error)
	// Adopt lists every job this runtime started on this host that was not
	// removed, with its state now.
	Adopt(ctx context.Context) ([]Found, error)
	// Remove deletes what the job left behind (container, logs); the job
	// must have ended.
	Remove(ctx context.Context, h Handle) error
	// Close releases the runtime's connections; jobs keep running.
	Close() error
}

// ErrExitUnknown means the job ended but nothing recorded how (its
// supervisor died with it); the agent reports it as lost.
var ErrExitUnknown = errors.New("the job ended but its exit status was not recorded")
