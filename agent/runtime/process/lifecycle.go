package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gpud.dev/gpud/agent/runtime"
)

// Wait blocks until the job's shim has exited, then reads exit.json. For
// the agent's own shims it waits on the child; for adopted ones on a pidfd.
func (r *Runtime) Wait(ctx context.Context, h runtime.Handle) (runtime.Exit, error) {
	select {
	case <-r.doneChan(h):
	case <-ctx.Done():
		return runtime.Exit{}, ctx.Err()
	}
	e, err := readExit(r.jobDir(h.JobID))
	if errors.Is(err, os.ErrNotExist) {
		// The shim died with the job (it deletes the working directory
		// itself otherwise): what the job left there goes now.
		r.removeLostWorkDir(h.JobID)
		return runtime.Exit{}, fmt.Errorf("job %s: %w", h.JobID, runtime.ErrExitUnknown)
	}
	if err != nil {
		return runtime.Exit{}, fmt.Errorf("job %s: %w", h.JobID, err)
	}
	return e, nil
}

// doneChan returns the channel closed when h's shim exits, starting a
// pidfd waiter for shims this process did not start.
func (r *Runtime) doneChan(h runtime.Handle) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch, ok := r.done[h.JobID]; ok {
		return ch
	}
	ch := make(chan struct{})
	r.done[h.JobID] = ch
	pid, ticks, err := parseHandle(h.ID)
	if err != nil {
		close(ch)
		return ch
	}
	go func() {
		defer close(ch)
		for waitExit(context.Background(), pid, ticks) != nil {
			time.Sleep(time.Second) // poll(2) failed; retry rather than report a false exit
		}
	}()
	return ch
}

func parseHandle(id string) (pid int, ticks uint64, err error) {
	p, t, ok := strings.Cut(id, ":")
	if !ok {
		return 0, 0, fmt.Errorf("process handle %q: want pid:ticks", id)
	}
	if pid, err = strconv.Atoi(p); err != nil {
		return 0, 0, fmt.Errorf("process handle %q: %w", id, err)
	}
	if ticks, err = strconv.ParseUint(t, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("process handle %q: %w", id, err)
	}
	return pid, ticks, nil
}

// Stop sends SIGTERM to the job's process group, waits up to grace for the
// shim to record the exit, then sends SIGKILL to the group.
func (r *Runtime) Stop(ctx context.Context, h runtime.Handle, grace time.Duration) error {
	dir := r.jobDir(h.JobID)
	c, err := readChild(dir)
	if err != nil {
		return fmt.Errorf("job %s: %w", h.JobID, err)
	}
	if _, err := os.Stat(filepath.Join(dir, fileExit)); err == nil {
		return nil // already ended; its pid may be someone else's now
	}
	if err := syscall.Kill(-c.PID, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("job %s: SIGTERM: %w", h.JobID, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-r.doneChan(h):
		return nil
	case <-timer.C:
	case <-ctx.Done():
	}
	if err := syscall.Kill(-c.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("job %s: SIGKILL: %w", h.JobID, err)
	}
	return nil
}

// Adopt lists the jobs whose directories remain: running ones (their shim
// alive), ended ones with their exit, and lost ones.
func (r *Runtime) Adopt(ctx context.Context) ([]runtime.Found, error) {
	entries, err := os.ReadDir(r.cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	var found []runtime.Found
	for _, e := range entries {
		dir := filepath.Join(r.cfg.DataDir, e.Name())
		l, err := readMeta(dir)
		if err != nil {
			continue
		}
		c, err := readChild(dir)
		if err != nil {
			continue // the shim never started the job
		}
		h := runtime.Handle{JobID: l.JobID, ID: strconv.Itoa(c.ShimPID) + ":" + strconv.FormatUint(c.ShimStartTicks, 10), StartedAt: c.StartedAt}
		f := runtime.Found{Handle: h, RunName: l.RunName}
		if exit, err := readExit(dir); err == nil {
			f.Exit = exit
		} else if alive(c.ShimPID, c.ShimStartTicks) {
			f.Running = true
		} else {
			f.Lost = true
			r.removeLostWorkDir(l.JobID)
		}
		found = append(found, f)
	}
	return found, nil
}

// Remove deletes the job's directory (its logs included) and what is left
// of its working directory; the job must have ended.
func (r *Runtime) Remove(ctx context.Context, h runtime.Handle) error {
	dir := r.jobDir(h.JobID)
	if c, err := readChild(dir); err == nil {
		if _, err := os.Stat(filepath.Join(dir, fileExit)); err != nil && alive(c.ShimPID, c.ShimStartTicks) {
			return fmt.Errorf("job %s: still running; stop it first", h.JobID)
		}
	}
	r.forget(h.JobID)
	if m, err := readMeta(dir); err == nil {
		if err := removeWorkDir(r.cfg.WorkRoot, m.WorkDir); err != nil {
			return fmt.Errorf("job %s: %w", h.JobID, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("job %s: %w", h.JobID, err)
	}
	return nil
}

// removeLostWorkDir deletes the working directory of a job whose shim
// ended without recording an exit. A failure only leaves files of an ended
// job behind in the work root (Remove tries again), so it is not reported.
func (r *Runtime) removeLostWorkDir(jobID string) {
	if m, err := readMeta(r.jobDir(jobID)); err == nil {
		_ = removeWorkDir(r.cfg.WorkRoot, m.WorkDir) // see above: Remove retries
	}
}
