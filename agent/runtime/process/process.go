// Package process is the agent's runtime without images: each job runs as
// a process tree under a small supervisor (the shim, `gpud agent shim`)
// that outlives the agent. The shim puts the job in its own process group
// (and, for memory or CPU limits, its own cgroup), writes the job's output
// as timestamped lines to a file and its exit status to exit.json, so a
// restarted agent finds the job, its logs and its exit code again.
//
// What a job may reach: it runs as Config.RunAs (or, without it, as the
// agent's own user) in a fresh, empty working directory of its own under
// Config.WorkRoot, never in the agent's data dir, which it cannot enter
// when it runs as another user (the job directories there are 0700). The
// job's commands and environment (resolved secrets included) travel to the
// shim over its standard input and are never written to a file; the job
// directory keeps only job.json (id, run name, working directory), the
// job's output and its exit.
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
	fileMeta   = "job.json"    // the job's id, run name and working dir (written by the agent)
	fileLegacy = "launch.json" // what agents before job.json wrote, secrets included; removed on adoption
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
	// RunAs is the user every job runs as ("name", "uid" or "uid:gid"),
	// which needs the agent to be root; a job's own `user` must then be
	// empty or name the same user. "" runs jobs as the agent's user (or
	// as the job's `user`, which only root can switch to).
	RunAs string
	// WorkRoot holds one fresh working directory per job (mode 0700,
	// owned by the job's user, a random name); the root itself is 0711, so
	// a job can reach its own directory but not list the others. Default
	// /var/tmp/gpud-work-<hash of DataDir>; it must not lie inside a
	// directory the job's user cannot traverse (like a 0700 data dir).
	WorkRoot string
	// UploadDir holds the upload archives (<sha256>.tar.gz) the agent
	// keeps; a job naming one (JobSpec.Upload) gets it unpacked into its
	// working directory before its commands run.
	UploadDir string
}

// Runtime runs jobs as supervised process trees. It is safe for concurrent use.
type Runtime struct {
	cfg Config
	// runAs is Config.RunAs resolved; nil runs jobs as the agent's user.
	runAs *credential

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
	// The job directories hold the jobs' output: only the agent reads them.
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	r := &Runtime{cfg: cfg, done: map[string]chan struct{}{}}
	if cfg.RunAs != "" {
		c, err := lookupCredential(cfg.RunAs)
		if err != nil {
			return nil, fmt.Errorf("process runtime: run jobs as %q: %w", cfg.RunAs, err)
		}
		if c.uid != uint32(os.Geteuid()) && os.Geteuid() != 0 {
			return nil, fmt.Errorf("process runtime: run jobs as %q (uid %d): only root can switch to another user, and this agent runs as uid %d", cfg.RunAs, c.uid, os.Geteuid())
		}
		r.runAs = &c
	}
	if r.cfg.WorkRoot == "" {
		root, err := defaultWorkRoot(cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("process runtime: %w", err)
		}
		r.cfg.WorkRoot = root
	}
	if err := makeWorkRoot(r.cfg.WorkRoot); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	return r, nil
}

// WorkRoot is the directory that holds the jobs' working directories.
func (r *Runtime) WorkRoot() string { return r.cfg.WorkRoot }

// Name returns "process".
func (r *Runtime) Name() string { return "process" }

// Close releases nothing: jobs and their shims keep running. It removes
// the work root when no job directory is left in it; a root that still
// holds one stays (os.Remove refuses a non-empty directory, as wanted).
func (r *Runtime) Close() error {
	_ = os.Remove(r.cfg.WorkRoot) // not empty: running jobs keep it; nothing to report
	return nil
}

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
