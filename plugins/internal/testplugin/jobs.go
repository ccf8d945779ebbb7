package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// The test engine's state, in state_dir:
//
//	<gang>.json      the gang: its id and jobs (id, commands or not, start time)
//	<gang>.d/<job>.log   the job's output (stdout and stderr)
//	<gang>.d/<job>.pid   the job's process (a session leader)
//	<gang>.d/<job>.exit  its exit code, written by the wrapper shell when it ends
//
// A job without commands (the protocol tests') runs nothing and is
// reported running until its gang is stopped.

type gangFile struct {
	ID   string    `json:"id"`
	Jobs []gangJob `json:"jobs"`
	// Service: the server asked for the gang's ports to be published as
	// a service (plugins.Gang.Service); its jobs' loopback ports are.
	Service bool `json:"service,omitempty"`
}

type gangJob struct {
	ID       string    `json:"id"`
	Commands bool      `json:"commands,omitempty"`
	Started  time.Time `json:"started"`
	// GPUs is how many GPUs the job holds while it runs: the offers give
	// what is left, as a Kubernetes cluster's do.
	GPUs int `json:"gpus,omitempty"`
}

func safeName(id string) string { return strings.ReplaceAll(id, "/", "_") }

func (b *backend) gangFile(id string) string {
	return filepath.Join(b.cfg.StateDir, safeName(id)+".json")
}

func (b *backend) gangDir(id string) string {
	return filepath.Join(b.cfg.StateDir, safeName(id)+".d")
}

func (b *backend) readGang(id string) (*gangFile, error) {
	data, err := os.ReadFile(b.gangFile(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var g gangFile
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, fmt.Errorf("gang %s: %w", id, err)
	}
	return &g, nil
}

// StartGang starts every job of the gang, or none: a job that cannot start
// stops the ones started before it.
func (b *backend) StartGang(_ context.Context, g plugins.Gang) error {
	if _, err := os.Stat(b.gangFile(g.ID)); err == nil {
		return nil // already started
	}
	dir := b.gangDir(g.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	gf := gangFile{ID: g.ID, Service: g.Service}
	var pids []int
	for _, j := range g.Jobs {
		gj := gangJob{ID: j.ID, Started: time.Now().UTC(), Commands: len(j.Commands) > 0, GPUs: len(j.GPUs.Devices)}
		if gj.Commands {
			pid, err := b.startJob(dir, j)
			if err != nil {
				for _, p := range pids {
					_ = syscall.Kill(-p, syscall.SIGKILL)
				}
				_ = os.RemoveAll(dir)
				return fmt.Errorf("job %s: %w", j.ID, err)
			}
			pids = append(pids, pid)
		}
		gf.Jobs = append(gf.Jobs, gj)
	}
	data, err := json.Marshal(gf)
	if err != nil {
		return err
	}
	b.log.Info().Str("gang", g.ID).Int("jobs", len(gf.Jobs)).Msg("gang started")
	return os.WriteFile(b.gangFile(g.ID), data, 0o600)
}

// startJob runs the job's commands as a process in its own session (it
// outlives this plugin), under a wrapper shell that records its exit code.
func (b *backend) startJob(dir string, j api.JobSpec) (int, error) {
	argv := runtime.ShellCommand(j)
	if len(j.Entrypoint) > 0 {
		argv = append(append([]string{}, j.Entrypoint...), j.Commands...)
	}
	base := filepath.Join(dir, safeName(j.ID))
	out, err := os.OpenFile(base+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	const wrapper = `"$@"; c=$?; echo $c > "$0.tmp" && mv "$0.tmp" "$0"`
	cmd := exec.Command("/bin/sh", append([]string{"-c", wrapper, base + ".exit"}, argv...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, runtime.Environment(j, "")...)
	cmd.Dir = dir
	if j.WorkingDir != "" {
		cmd.Dir = j.WorkingDir
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() { _ = cmd.Wait() }() // reap it while this plugin lives
	pid := cmd.Process.Pid
	return pid, os.WriteFile(base+".pid", []byte(strconv.Itoa(pid)), 0o600)
}

// jobState reads one job's state from its files.
func (b *backend) jobState(gang string, j gangJob) api.JobStatus {
	st := api.JobStatus{ID: j.ID, Runtime: "test", State: api.JobRunning, CreatedAt: j.Started, StartedAt: j.Started}
	if !j.Commands {
		return st
	}
	base := filepath.Join(b.gangDir(gang), safeName(j.ID))
	if data, err := os.ReadFile(base + ".exit"); err == nil {
		code, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			code = -1
		}
		st.ExitCode, st.State, st.Reason = code, api.JobDone, api.ExitExited
		if code != 0 {
			st.State = api.JobFailed
		}
		if fi, err := os.Stat(base + ".exit"); err == nil {
			st.FinishedAt = fi.ModTime().UTC()
		}
		return st
	}
	if !alive(base + ".pid") {
		st.State, st.ExitCode, st.Reason, st.Message = api.JobFailed, -1, api.ExitLost, "the job's process ended without an exit code"
	}
	return st
}

// alive reports whether the process in pidfile still runs (a zombie
// left by a killed plugin counts as ended).
func alive(pidfile string) bool {
	data, err := os.ReadFile(pidfile)
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	return true
}

func (b *backend) Status(_ context.Context, gang string) ([]api.JobStatus, error) {
	g, err := b.readGang(gang)
	if err != nil || g == nil {
		return nil, err
	}
	out := make([]api.JobStatus, 0, len(g.Jobs))
	for _, j := range g.Jobs {
		out = append(out, b.jobState(gang, j))
	}
	return out, nil
}

func (b *backend) List(context.Context) ([]string, error) {
	entries, err := os.ReadDir(b.cfg.StateDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Stop sends each running job's session SIGTERM, then SIGKILL after
// grace, and deletes the gang's files.
func (b *backend) Stop(ctx context.Context, gang string, grace time.Duration) error {
	g, err := b.readGang(gang)
	if err != nil {
		return err
	}
	if g != nil {
		var pids []int
		for _, j := range g.Jobs {
			pf := filepath.Join(b.gangDir(gang), safeName(j.ID)+".pid")
			if j.Commands && alive(pf) {
				data, _ := os.ReadFile(pf)
				if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
					_ = syscall.Kill(-pid, syscall.SIGTERM)
					pids = append(pids, pid)
				}
			}
		}
		deadline := time.Now().Add(max(grace, 100*time.Millisecond))
		for _, pid := range pids {
			for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil && ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond)
			}
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		b.log.Info().Str("gang", gang).Int("processes", len(pids)).Msg("gang stopped")
	}
	if err := os.RemoveAll(b.gangDir(gang)); err != nil {
		return err
	}
	if err := os.Remove(b.gangFile(gang)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// findJob finds the gang holding job.
func (b *backend) findJob(job string) (string, gangJob, bool) {
	gangs, err := b.List(context.Background())
	if err != nil {
		return "", gangJob{}, false
	}
	for _, id := range gangs {
		g, err := b.readGang(id)
		if err != nil || g == nil {
			continue
		}
		for _, j := range g.Jobs {
			if j.ID == job {
				return id, j, true
			}
		}
	}
	return "", gangJob{}, false
}

// Logs sends the job's output lines, each stamped with the job's start
// plus its line number in microseconds: the same line gets the same time
// at every read, so a server resuming after a restart skips what it kept.
// follow waits for more until the job has ended and its output is read.
func (b *backend) Logs(ctx context.Context, job string, follow bool, emit func(api.JobLogEntry) error) error {
	gang, j, ok := b.findJob(job)
	if !ok || !j.Commands {
		// A job without commands (or an unknown one): three lines, as the
		// protocol tests expect.
		for i := range 3 {
			if err := emit(api.JobLogEntry{Time: time.Now(), Stream: api.LogStdout, Line: fmt.Sprintf("%s line %d", job, i)}); err != nil {
				return err
			}
		}
		return nil
	}
	f, err := os.Open(filepath.Join(b.gangDir(gang), safeName(job)+".log"))
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	n := 0
	var part string
	for {
		line, err := r.ReadString('\n')
		part += line
		if err == nil {
			if e := emit(api.JobLogEntry{Time: j.Started.Add(time.Duration(n) * time.Microsecond), Stream: api.LogStdout, Line: strings.TrimSuffix(part, "\n")}); e != nil {
				return e
			}
			n, part = n+1, ""
			continue
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		ended := b.jobState(gang, j).State.Finished()
		if !follow || ended {
			if ended {
				// The exit file is written after the last output: read what
				// came in between once more.
				rest, _ := io.ReadAll(r)
				part += string(rest)
			}
			for _, l := range strings.SplitAfter(part, "\n") {
				if l == "" {
					continue
				}
				if e := emit(api.JobLogEntry{Time: j.Started.Add(time.Duration(n) * time.Microsecond), Stream: api.LogStdout, Line: strings.TrimSuffix(l, "\n")}); e != nil {
					return e
				}
				n++
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// heldGPUs is how many GPUs the engine's unfinished jobs hold.
func (b *backend) heldGPUs() float64 {
	gangs, err := b.List(context.Background())
	if err != nil {
		return 0
	}
	held := 0
	for _, id := range gangs {
		g, err := b.readGang(id)
		if err != nil || g == nil {
			continue
		}
		for _, j := range g.Jobs {
			if !b.jobState(id, j).State.Finished() {
				held += j.GPUs
			}
		}
	}
	return float64(held)
}
