package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// Start writes the job's launch file, starts its shim in a new session
// (so it survives the agent) and returns once the shim reports the job's
// main process running.
func (r *Runtime) Start(ctx context.Context, spec api.JobSpec, _ func()) (runtime.Handle, error) {
	l, ports, err := r.launchOf(spec)
	if err != nil {
		return runtime.Handle{}, err
	}
	dir := r.jobDir(spec.ID)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return runtime.Handle{}, fmt.Errorf("job %s: %w", spec.ID, err)
	}
	fail := func(err error) (runtime.Handle, error) {
		os.RemoveAll(dir)
		return runtime.Handle{}, err
	}
	hostfile := filepath.Join(dir, fileHosts)
	if err := os.WriteFile(hostfile, []byte(runtime.Hostfile(spec)), 0o644); err != nil {
		return fail(fmt.Errorf("job %s: %w", spec.ID, err))
	}
	l.Env = processEnv(spec, hostfile)
	if err := writeJSON(filepath.Join(dir, fileLaunch), l); err != nil {
		return fail(fmt.Errorf("job %s: %w", spec.ID, err))
	}
	shimLog, err := os.OpenFile(filepath.Join(dir, fileShim), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fail(fmt.Errorf("job %s: %w", spec.ID, err))
	}
	defer shimLog.Close()
	hr, hw, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("job %s: %w", spec.ID, err))
	}
	defer hr.Close()
	argv := append(append([]string{}, r.cfg.ShimCommand...), dir)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = shimLog, shimLog
	cmd.ExtraFiles = []*os.File{hw} // descriptor 3 in the shim
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	hw.Close()
	if err != nil {
		return fail(fmt.Errorf("job %s: start shim: %w", spec.ID, err))
	}
	done := make(chan struct{})
	r.mu.Lock()
	r.done[spec.ID] = done
	r.mu.Unlock()
	go func() { cmd.Wait(); close(done) }()

	stop := context.AfterFunc(ctx, func() { hr.Close() })
	defer stop()
	var c child
	if err := json.NewDecoder(hr).Decode(&c); err != nil || c.Error != "" {
		<-done
		msg, _ := os.ReadFile(filepath.Join(dir, fileShim))
		r.forget(spec.ID)
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		return fail(fmt.Errorf("job %s: %s", spec.ID, strings.TrimSpace(string(msg))))
	}
	return runtime.Handle{
		JobID:     spec.ID,
		ID:        strconv.Itoa(c.ShimPID) + ":" + strconv.FormatUint(c.ShimStartTicks, 10),
		StartedAt: c.StartedAt,
		Ports:     ports,
	}, nil
}

// launchOf checks what a process can honour of the spec and translates it.
func (r *Runtime) launchOf(spec api.JobSpec) (launch, []api.JobPort, error) {
	argv := runtime.ShellCommand(spec)
	if argv == nil {
		return launch{}, nil, fmt.Errorf("job %s: the process runtime needs commands (there is no image entrypoint)", spec.ID)
	}
	for _, v := range spec.Volumes {
		if filepath.Clean(v.HostPath) != filepath.Clean(v.Path) {
			return launch{}, nil, fmt.Errorf("job %s: volume %s:%s: the process runtime cannot remap paths; use the host path in the job", spec.ID, v.HostPath, v.Path)
		}
	}
	var ports []api.JobPort
	for _, p := range spec.Ports {
		if p.Host != 0 && p.Host != p.Container {
			return launch{}, nil, fmt.Errorf("job %s: port %d:%d: processes share the host network, so the host port must equal the job port", spec.ID, p.Host, p.Container)
		}
		p.Host = p.Container
		ports = append(ports, p)
	}
	l := launch{JobID: spec.ID, RunName: spec.RunName, AgentID: r.cfg.AgentID, Argv: argv, Dir: spec.WorkingDir,
		Memory: int64(spec.Memory), CPUs: spec.CPUs}
	if spec.User != "" {
		uid, gid, err := lookupUser(spec.User)
		if err != nil {
			return launch{}, nil, fmt.Errorf("job %s: user %q: %w", spec.ID, spec.User, err)
		}
		l.UID, l.GID = &uid, &gid
	}
	return l, ports, nil
}

// processEnv is the job environment on top of a minimal base (PATH, HOME)
// taken from the agent, so jobs find the host's tools.
func processEnv(spec api.JobSpec, hostfile string) []string {
	base := []string{}
	for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			if _, set := spec.Env[k]; !set {
				base = append(base, k+"="+v)
			}
		}
	}
	return append(base, runtime.Environment(spec, hostfile)...)
}

// lookupUser resolves "uid", "uid:gid", "name" or "name:group".
func lookupUser(s string) (uint32, uint32, error) {
	name, group, _ := strings.Cut(s, ":")
	var uid, gid uint64
	var err error
	if uid, err = strconv.ParseUint(name, 10, 32); err != nil {
		u, lerr := user.Lookup(name)
		if lerr != nil {
			return 0, 0, lerr
		}
		uid, _ = strconv.ParseUint(u.Uid, 10, 32)
		gid, _ = strconv.ParseUint(u.Gid, 10, 32)
	} else if u, lerr := user.LookupId(name); lerr == nil {
		gid, _ = strconv.ParseUint(u.Gid, 10, 32)
	} else {
		gid = uid
	}
	if group != "" {
		if gid, err = strconv.ParseUint(group, 10, 32); err != nil {
			g, lerr := user.LookupGroup(group)
			if lerr != nil {
				return 0, 0, errors.Join(err, lerr)
			}
			gid, _ = strconv.ParseUint(g.Gid, 10, 32)
		}
	}
	return uint32(uid), uint32(gid), nil
}

func (r *Runtime) forget(jobID string) {
	r.mu.Lock()
	delete(r.done, jobID)
	r.mu.Unlock()
}
