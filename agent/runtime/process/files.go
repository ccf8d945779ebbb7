package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/internal/atomicfile"
)

// launch is what the agent asks the shim to run. It holds the job's
// resolved environment and commands, so it only ever travels over the
// shim's standard input, never into a file.
type launch struct {
	JobID   string   `json:"job_id"`
	RunName string   `json:"run_name"`
	AgentID string   `json:"agent_id"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env"`
	Dir     string   `json:"dir,omitempty"`
	// WorkDir is the job's fresh working directory; the shim deletes it
	// when the job has ended.
	WorkDir string  `json:"work_dir,omitempty"`
	UID     *uint32 `json:"uid,omitempty"`
	GID     *uint32 `json:"gid,omitempty"`
	// Memory and CPUs are enforced through a cgroup; 0 means none.
	Memory int64   `json:"memory,omitempty"`
	CPUs   float64 `json:"cpus,omitempty"`
}

// meta is what the job directory keeps about the job, so a restarted
// agent can adopt and clean it up: no commands, no environment.
type meta struct {
	JobID   string `json:"job_id"`
	RunName string `json:"run_name"`
	WorkDir string `json:"work_dir,omitempty"`
}

// readMeta reads dir's job.json. A job started by an agent before job.json
// existed has only launch.json, which held its environment in plaintext:
// its id, run name and working directory are carried over into job.json and
// launch.json is deleted (its shim read it long ago).
func readMeta(dir string) (meta, error) {
	var m meta
	err := readJSON(filepath.Join(dir, fileMeta), &m)
	if !errors.Is(err, os.ErrNotExist) {
		return m, err
	}
	var l launch
	if err := readJSON(filepath.Join(dir, fileLegacy), &l); err != nil {
		return meta{}, err
	}
	m = meta{JobID: l.JobID, RunName: l.RunName, WorkDir: l.WorkDir}
	if err := writeJSON(filepath.Join(dir, fileMeta), m); err != nil {
		return meta{}, err
	}
	if err := os.Remove(filepath.Join(dir, fileLegacy)); err != nil {
		return meta{}, err
	}
	return m, nil
}

// child is the job's main process, as the shim started it.
type child struct {
	ShimPID        int       `json:"shim_pid"`
	ShimStartTicks uint64    `json:"shim_start_ticks"`
	PID            int       `json:"pid"`
	StartedAt      time.Time `json:"started_at"`
	MemoryLimit    int64     `json:"memory_limit,omitempty"`
	Error          string    `json:"error,omitempty"` // the shim could not start the job
}

// writeJSON writes v to path atomically (temporary file, fsync, rename), so
// a reader never sees half a file even if the writer dies.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, b, 0o600)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func readChild(dir string) (child, error) {
	var c child
	err := readJSON(filepath.Join(dir, fileChild), &c)
	return c, err
}

func readExit(dir string) (runtime.Exit, error) {
	var e runtime.Exit
	err := readJSON(filepath.Join(dir, fileExit), &e)
	return e, err
}
