package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/creack/pty"

	"gpud.dev/gpud/agent/runtime"
)

var _ runtime.Execer = (*Runtime)(nil)

// Exec runs req as the job's main process runs: as its user, in its
// working directory, with its environment (read from /proc, since the
// environment is never written to a file). With a TTY the command gets a
// pseudo-terminal of its own (github.com/creack/pty: opening and sizing a
// pty takes ioctls the standard library does not wrap) in a new session,
// which ending ctx kills whole.
func (r *Runtime) Exec(ctx context.Context, h runtime.Handle, req runtime.ExecRequest) (int, error) {
	pid, _, err := parseHandle(h.ID)
	if err != nil {
		return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
	}
	c, err := readChild(r.jobDir(h.JobID))
	if err != nil {
		return -1, fmt.Errorf("job %s: exec: the job's process is not known: %w", h.JobID, err)
	}
	if c.PID > 0 {
		pid = c.PID // the job's own process, not its shim
	}
	uid, gid, err := procCredential(pid)
	if err != nil {
		return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
	}
	env, err := procEnviron(pid, uid, gid)
	if err != nil {
		return -1, fmt.Errorf("job %s: exec: read its environment: %w", h.JobID, err)
	}
	// The directory the job's commands run in (its working_dir), else
	// its fresh working directory.
	dir, err := procCwd(pid, uid, gid)
	if err != nil {
		m, merr := readMeta(r.jobDir(h.JobID))
		if merr != nil {
			return -1, fmt.Errorf("job %s: exec: its working directory: %w", h.JobID, errors.Join(err, merr))
		}
		dir = m.WorkDir
	}
	shell := "/bin/sh"
	if _, err := os.Stat("/bin/bash"); err == nil {
		shell = "/bin/bash"
	}
	args := []string{shell, "-l"}
	if req.Command != "" {
		args = []string{shell, "-c", req.Command}
	}
	// On cgroup v1 a child cannot be started inside a cgroup: it waits at
	// a gate (reading its descriptor) until it was moved into the job's, so nothing
	// it runs escapes the job's limits.
	v1, err := v1CgroupProcs(pid)
	if err != nil {
		return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
	}
	var gate *cgroupGate
	if len(v1) > 0 {
		if gate, err = newCgroupGate(v1); err != nil {
			return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
		}
		defer gate.close()
	}
	cmd := exec.Command(args[0], args[1:]...)
	gate.wrap(cmd)
	cmd.Dir = dir
	cmd.Env = append(env, req.Env...)
	if req.Term != "" {
		cmd.Env = append(cmd.Env, "TERM="+req.Term)
	}
	if dir != "" {
		cmd.Env = append(cmd.Env, "PWD="+dir, "HOME="+homeOr(env, dir))
	}
	attrs := &syscall.SysProcAttr{Setsid: true}
	if uid != uint32(os.Geteuid()) || gid != uint32(os.Getegid()) {
		attrs.Credential = &syscall.Credential{Uid: uid, Gid: gid}
	}
	// The command starts in the job's cgroup, so the job's memory and CPU
	// limits bind it too (clone3 with CLONE_INTO_CGROUP: no moment outside).
	cg, err := jobCgroup(pid)
	if err != nil {
		return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
	}
	if cg != nil {
		defer cg.Close()
		attrs.UseCgroupFD, attrs.CgroupFD = true, int(cg.Fd())
	}
	if !req.TTY {
		cmd.SysProcAttr = attrs
		cmd.Stdout, cmd.Stderr = req.Stdout, req.Stderr
		// Standard input is copied here, not by cmd, so that Wait does
		// not wait for a client that never closes it.
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
		}
		if err := cmd.Start(); err != nil {
			return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
		}
		if err := gate.open(cmd.Process.Pid); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
		}
		go func() {
			if req.Stdin != nil {
				_, _ = io.Copy(stdin, req.Stdin) // ends when either side closes
			}
			stdin.Close()
		}()
		return waitExec(ctx, cmd)
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		return -1, fmt.Errorf("job %s: exec: open a terminal: %w", h.JobID, err)
	}
	defer ptmx.Close()
	// The job's user owns its terminal, as sshd arranges for a login.
	if err := tty.Chown(int(uid), int(gid)); err != nil {
		tty.Close()
		return -1, fmt.Errorf("job %s: exec: terminal owner: %w", h.JobID, err)
	}
	if err := pty.Setsize(ptmx, winsize(req.Size)); err != nil {
		tty.Close()
		return -1, fmt.Errorf("job %s: exec: terminal size: %w", h.JobID, err)
	}
	attrs.Setctty = true
	cmd.SysProcAttr = attrs
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	err = cmd.Start()
	tty.Close() // the child holds its own copy
	if err != nil {
		return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
	}
	if err := gate.open(cmd.Process.Pid); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
	}
	go func() {
		for ws := range req.Resize {
			_ = pty.Setsize(ptmx, winsize(ws)) // the session may just have ended; a lost resize is harmless
		}
	}()
	if req.Stdin != nil {
		go func() { _, _ = io.Copy(ptmx, req.Stdin) }() // ends with the session
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(req.Stdout, ptmx) // EIO once the last holder of the terminal exits
	}()
	code, err := waitExec(ctx, cmd)
	<-copied
	return code, err
}

// waitExec waits for cmd; ending ctx kills its whole session.
func waitExec(ctx context.Context, cmd *exec.Cmd) (int, error) {
	stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer stop()
	err := cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		if st, ok := exit.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			return 128 + int(st.Signal()), nil
		}
		return exit.ExitCode(), nil
	default:
		return -1, err
	}
}

func winsize(ws runtime.WindowSize) *pty.Winsize {
	if ws.Rows == 0 || ws.Cols == 0 {
		ws = runtime.WindowSize{Rows: 24, Cols: 80}
	}
	return &pty.Winsize{Rows: ws.Rows, Cols: ws.Cols}
}

// procEnviron is the environment a process started with. Reading another
// user's takes CAP_SYS_PTRACE, which an agent in a container may lack even
// as root; then it is read as the job's own user, who may.
func procEnviron(pid int, uid, gid uint32) ([]string, error) {
	path := fmt.Sprintf("/proc/%d/environ", pid)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrPermission) {
		b, err = asUser(uid, gid, "cat", path)
	}
	if err != nil {
		return nil, err
	}
	var env []string
	for _, kv := range bytes.Split(b, []byte{0}) {
		if len(kv) > 0 {
			env = append(env, string(kv))
		}
	}
	return env, nil
}

// procCredential is the effective uid and gid a process runs as.
func procCredential(pid int) (uid, gid uint32, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, err
	}
	var got int
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		f := strings.Fields(v)
		if !ok || len(f) < 2 || (k != "Uid" && k != "Gid") {
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 32) // effective id
		if err != nil {
			return 0, 0, fmt.Errorf("process %d: %s: %w", pid, k, err)
		}
		if k == "Uid" {
			uid = uint32(n)
		} else {
			gid = uint32(n)
		}
		got++
	}
	if got != 2 {
		return 0, 0, fmt.Errorf("process %d: no Uid or Gid in its status", pid)
	}
	return uid, gid, nil
}

// homeOr is the job's HOME, or dir when it has none.
func homeOr(env []string, dir string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok && v != "" {
			return v
		}
	}
	return dir
}

var _ runtime.PortDialer = (*Runtime)(nil)

// DialJob connects to port on the host's loopback: a process job shares
// the host's network namespace, so that is what the job reaches there.
func (r *Runtime) DialJob(ctx context.Context, h runtime.Handle, port int) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("job %s: port %d: %w", h.JobID, port, err)
	}
	return conn, nil
}

// jobCgroup opens the cgroup v2 directory process pid runs in, or returns
// nil when it is the agent's own (nothing to join) or the host has no
// unified hierarchy (v1: joinV1Cgroups).
func jobCgroup(pid int) (*os.File, error) {
	if _, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers")); err != nil {
		return nil, nil
	}
	path, err := procCgroups(strconv.Itoa(pid))
	if err != nil {
		return nil, err
	}
	own, err := procCgroups("self")
	if err != nil {
		return nil, err
	}
	if path[""] == "" || path[""] == own[""] {
		return nil, nil
	}
	f, err := os.Open(filepath.Join(cgroupFS, path[""]))
	if err != nil {
		return nil, fmt.Errorf("the job's cgroup: %w", err)
	}
	return f, nil
}

// v1CgroupProcs lists the cgroup.procs files of the v1 memory and cpu
// cgroups of the job's process pid that differ from the agent's own (the
// job's limits); none on a v2 host or for a job without limits.
func v1CgroupProcs(pid int) ([]string, error) {
	if _, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers")); err == nil {
		return nil, nil
	}
	job, err := procCgroups(strconv.Itoa(pid))
	if err != nil {
		return nil, err
	}
	own, err := procCgroups("self")
	if err != nil {
		return nil, err
	}
	var out []string
	for ctrl, path := range job {
		if ctrl == "" || path == own[ctrl] || !(strings.Contains(ctrl, "memory") || strings.Contains(ctrl, "cpu")) {
			continue
		}
		out = append(out, filepath.Join(cgroupFS, ctrl, path, "cgroup.procs"))
	}
	return out, nil
}

// procCgroups maps each hierarchy of /proc/<pid>/cgroup (its controllers,
// "" for v2) to the process's path in it.
func procCgroups(pid string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 {
			out[parts[1]] = parts[2]
		}
	}
	return out, nil
}

// procCwd is a process's current directory (read as its user when the
// agent may not: see procEnviron).
func procCwd(pid int, uid, gid uint32) (string, error) {
	path := fmt.Sprintf("/proc/%d/cwd", pid)
	dir, err := os.Readlink(path)
	if errors.Is(err, os.ErrPermission) {
		var b []byte
		if b, err = asUser(uid, gid, "readlink", path); err == nil {
			dir = strings.TrimSuffix(string(b), "\n")
		}
	}
	return dir, err
}

// asUser runs a small command as uid:gid and returns its output.
func asUser(uid, gid uint32, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	if uid != uint32(os.Geteuid()) || gid != uint32(os.Getegid()) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s as uid %d: %w: %s", name, strings.Join(args, " "), uid, err, strings.TrimSpace(errb.String()))
	}
	return out, nil
}
