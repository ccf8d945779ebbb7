// Package process is the agent's runtime without images: each job runs as
// a process tree under a small supervisor (the shim, `gpud agent shim`)
// that outlives the agent. The shim puts the job in its own process group
// (and, for memory or CPU limits, its own cgroup), writes the job's output
// as timestamped lines to a file and its exit status to exit.json, so a
// restarted agent finds the job, its logs and its exit code again.
//
// process must not import daemon, store, sched, plugins, proxy, nor the
// agent package itself; it implements runtime.Runtime.
package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"gpud.dev/gpud/agent/runtime"
)

// Files in a job's directory.
const (
	fileLaunch = "launch.json" // what the shim runs (written by the agent)
	fileChild  = "child.json"  // the job's main process (written by the shim)
	fileExit   = "exit.json"   // how it ended (written by the shim)
	fileOutput = "output.log"  // newline-delimited api.JobLogEntry
	fileShim   = "shim.log"    // the shim's own errors
	fileHosts  = "mpi_hostfile"
)

// Config configures the process runtime.
type Config struct {
	// DataDir holds one directory per job (launch, output, exit files).
	DataDir string
	// AgentID names this agent's cgroup; default "default".
	AgentID string
	// ShimCommand starts the shim; the job directory is appended. Default:
	// this executable with "agent shim".
	ShimCommand []string
}

// Runtime runs jobs as supervised process trees. It is safe for concurrent use.
type Runtime struct {
	cfg Config

	mu   sync.Mutex
	done map[string]chan struct{} // job id -> closed when its shim has exited
}

var _ runtime.Runtime = (*Runtime)(nil)

// New prepares the data directory; it starts nothing.
func New(cfg Config) (*Runtime, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("process runtime: DataDir is required")
	}
	if cfg.AgentID == "" {
		cfg.AgentID = "default"
	}
	if len(cfg.ShimCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("process runtime: find own executable for the shim: %w", err)
		}
		cfg.ShimCommand = []string{exe, "agent", "shim"}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	return &Runtime{cfg: cfg, done: map[string]chan struct{}{}}, nil
}

// Name returns "process".
func (r *Runtime) Name() string { return "process" }

// Close releases nothing: jobs and their shims keep running.
func (r *Runtime) Close() error { return nil }

func (r *Runtime) jobDir(jobID string) string { return filepath.Join(r.cfg.DataDir, jobID) }

// Usage sums CPU time and resident memory over the job's process group.
func (r *Runtime) Usage(ctx context.Context, h runtime.Handle) (runtime.Usage, error) {
	child, err := readChild(r.jobDir(h.JobID))
	if err != nil {
		return runtime.Usage{}, fmt.Errorf("job %s: %w", h.JobID, err)
	}
	u, err := groupUsage(child.PID)
	if err != nil {
		return runtime.Usage{}, fmt.Errorf("job %s: %w", h.JobID, err)
	}
	u.MemoryLimit = child.MemoryLimit
	return u, nil
}
