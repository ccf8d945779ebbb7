package process

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// Start makes the job's directory and fresh working directory, starts its
// shim in a new session (so it survives the agent), hands it the launch
// (commands and environment) over its standard input and returns once the
// shim reports the job's main process running.
func (r *Runtime) Start(ctx context.Context, spec api.JobSpec, _ func()) (runtime.Handle, error) {
	l, cred, ports, err := r.launchOf(spec)
	if err != nil {
		return runtime.Handle{}, err
	}
	dir := r.jobDir(spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return runtime.Handle{}, fmt.Errorf("job %s: %w", spec.ID, err)
	}
	if l.WorkDir, err = newWorkDir(r.cfg.WorkRoot, spec.ID, cred); err != nil {
		os.RemoveAll(dir)
		return runtime.Handle{}, fmt.Errorf("job %s: %w", spec.ID, err)
	}
	fail := func(err error) (runtime.Handle, error) {
		os.RemoveAll(l.WorkDir)
		os.RemoveAll(dir)
		return runtime.Handle{}, err
	}
	l.Dir = jobCwd(l.WorkDir, spec.WorkingDir)
	if l.Dir != l.WorkDir {
		if err := os.MkdirAll(l.Dir, 0o700); err != nil {
			return fail(fmt.Errorf("job %s: working_dir: %w", spec.ID, err))
		}
		if cred != nil && filepath.IsLocal(spec.WorkingDir) {
			if err := chownTree(l.WorkDir, spec.WorkingDir, cred); err != nil {
				return fail(fmt.Errorf("job %s: working_dir: %w", spec.ID, err))
			}
		}
	}
	if err := unpackUpload(r.cfg.UploadDir, spec, l.WorkDir, l.Dir, cred); err != nil {
		return fail(fmt.Errorf("job %s: %w", spec.ID, err))
	}
	// The hostfile is the gang's addresses, no secret; the job must read
	// it whatever the agent's umask (an SSH-started agent's may be 077).
	hostfile := filepath.Join(l.WorkDir, fileHosts)
	if err := os.WriteFile(hostfile, []byte(runtime.Hostfile(spec)), 0o644); err != nil {
		return fail(fmt.Errorf("job %s: %w", spec.ID, err))
	}
	if err := os.Chmod(hostfile, 0o644); err != nil {
		return fail(fmt.Errorf("job %s: %w", spec.ID, err))
	}
	l.Env = processEnv(spec, hostfile, l.WorkDir, cred != nil)
	if spec.Python != "" {
		if l.Env, err = usePython(l.Env, l.WorkDir, spec.Python, cred); err != nil {
			return fail(fmt.Errorf("job %s: %w", spec.ID, err))
		}
	}
	if err := writeJSON(filepath.Join(dir, fileMeta), meta{JobID: spec.ID, RunName: spec.RunName, WorkDir: l.WorkDir}); err != nil {
		return fail(fmt.Errorf("job %s: %w", spec.ID, err))
	}
	launchJSON, err := json.Marshal(l)
	if err != nil {
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
	// exec copies the launch into a pipe to the shim; it exists in the
	// agent's and the shim's memory only.
	cmd.Stdin = bytes.NewReader(launchJSON)
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

// jobCwd is where the job starts: its fresh working directory, the spec's
// working_dir inside it when relative, or the spec's absolute working_dir
// (reached with the job user's own permissions).
func jobCwd(workDir, specDir string) string {
	switch {
	case specDir == "":
		return workDir
	case filepath.IsAbs(specDir):
		return specDir
	default:
		return filepath.Join(workDir, specDir)
	}
}

// chownTree gives the job's user the directories of rel made under base.
func chownTree(base, rel string, c *credential) error {
	p := base
	for _, part := range strings.Split(filepath.Clean(rel), string(filepath.Separator)) {
		p = filepath.Join(p, part)
		if err := os.Lchown(p, int(c.uid), int(c.gid)); err != nil {
			return err
		}
	}
	return nil
}

// launchOf checks what a process can honour of the spec and translates it;
// the credential is whom the job runs as (nil: the agent's own user).
func (r *Runtime) launchOf(spec api.JobSpec) (launch, *credential, []api.JobPort, error) {
	switch {
	case len(spec.Entrypoint) > 0:
		return launch{}, nil, nil, errNotProcess(spec.ID, "entrypoint", "start the program from commands")
	case spec.Privileged:
		return launch{}, nil, nil, errNotProcess(spec.ID, "privileged", "run it in Docker on a host whose admin allows privileged jobs")
	case spec.ShmSize > 0:
		return launch{}, nil, nil, errNotProcess(spec.ID, "shm_size", "processes share the host's /dev/shm; drop shm_size")
	}
	argv := runtime.ShellCommand(spec)
	if argv == nil {
		return launch{}, nil, nil, fmt.Errorf("job %s: the process runtime needs commands (there is no image entrypoint)", spec.ID)
	}
	for _, v := range spec.Volumes {
		if filepath.Clean(v.HostPath) != filepath.Clean(v.Path) {
			return launch{}, nil, nil, fmt.Errorf("job %s: volume %s:%s: the process runtime cannot remap paths; use the host path in the job", spec.ID, v.HostPath, v.Path)
		}
	}
	if !filepath.IsAbs(spec.WorkingDir) && spec.WorkingDir != "" && !filepath.IsLocal(spec.WorkingDir) {
		return launch{}, nil, nil, fmt.Errorf("job %s: working_dir %q: a relative working_dir must stay inside the job's working directory", spec.ID, spec.WorkingDir)
	}
	var ports []api.JobPort
	for _, p := range spec.Ports {
		if p.Host != 0 && p.Host != p.Container {
			return launch{}, nil, nil, fmt.Errorf("job %s: port %d:%d: processes share the host network, so the host port must equal the job port", spec.ID, p.Host, p.Container)
		}
		p.Host = p.Container
		ports = append(ports, p)
	}
	l := launch{JobID: spec.ID, RunName: spec.RunName, AgentID: r.cfg.AgentID, Argv: argv,
		Memory: int64(spec.Memory), CPUs: spec.CPUs}
	cred := r.runAs
	if spec.User != "" {
		c, err := lookupCredential(spec.User)
		if err != nil {
			return launch{}, nil, nil, fmt.Errorf("job %s: user %q: %w", spec.ID, spec.User, err)
		}
		if r.runAs != nil && c.uid != r.runAs.uid {
			return launch{}, nil, nil, fmt.Errorf("job %s: user %q: this host's process runtime runs every job as %s (uid %d); a job cannot choose another user", spec.ID, spec.User, r.runAs.name, r.runAs.uid)
		}
		cred = &c
	}
	if cred != nil {
		l.UID, l.GID = &cred.uid, &cred.gid
	}
	return l, cred, ports, nil
}

// processEnv is the job environment on top of a minimal base (PATH, LANG,
// TMPDIR, HOME) taken from the agent, so jobs find the host's tools. A job
// that runs as another user gets its working directory as HOME, not the
// agent's.
func processEnv(spec api.JobSpec, hostfile, workDir string, otherUser bool) []string {
	base := []string{}
	for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR"} {
		v, ok := os.LookupEnv(k)
		if k == "HOME" && otherUser {
			v, ok = workDir, true
		}
		if _, set := spec.Env[k]; ok && !set {
			base = append(base, k+"="+v)
		}
	}
	return append(base, runtime.Environment(spec, hostfile)...)
}

func (r *Runtime) forget(jobID string) {
	r.mu.Lock()
	delete(r.done, jobID)
	r.mu.Unlock()
}
