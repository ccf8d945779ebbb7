package process

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"gpud.dev/gpud/agent/runtime"
)

// launch is what the agent asks the shim to run.
type launch struct {
	JobID   string   `json:"job_id"`
	RunName string   `json:"run_name"`
	AgentID string   `json:"agent_id"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env"`
	Dir     string   `json:"dir,omitempty"`
	UID     *uint32  `json:"uid,omitempty"`
	GID     *uint32  `json:"gid,omitempty"`
	// Memory and CPUs are enforced through a cgroup; 0 means none.
	Memory int64   `json:"memory,omitempty"`
	CPUs   float64 `json:"cpus,omitempty"`
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
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
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
