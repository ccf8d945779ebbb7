package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/agent/runtime/process"
	"gpud.dev/gpud/api"
)

// mixedName is what the embedded server's local agent reports as its
// runtime when it runs both kinds of job.
const mixedName = "docker+process"

// mixedRuntime is the embedded server's local agent runtime when Docker is
// reachable and no runtime was forced: jobs with an image run as
// containers, image-less jobs (testdata/hello.yml) as plain processes of
// the invoking user, as the docker runtime cannot run a job without an
// image. A `gpud serve` server never uses it: there image-less jobs get
// Options.DefaultImage. Which runtime holds a job is remembered from Start
// and Adopt; a handle it has not seen is routed by its id's shape (the
// process runtime's ids are "<pid>:<ticks>").
type mixedRuntime struct {
	docker, process runtime.Runtime

	mu    sync.Mutex
	byJob map[string]runtime.Runtime
}

// openLocalRuntime opens the local agent's runtime. On `gpud serve` user
// code never runs with the server's privileges:
//   - Runtime "process" (the admin's opt-in) runs jobs as processes of
//     Options.ProcessUser, each in a fresh working directory outside the
//     data dir; a server that is not root refuses it unless
//     Options.ProcessAsServerUser accepts that jobs run as the server's user.
//   - Runtime "docker" needs the engine.
//   - Runtime "" runs every job in Docker; when the engine does not answer,
//     the runtime is unreachableRuntime, which fails each job with the fix,
//     never a silent fallback to host processes.
//   - Docker refuses `privileged: true` there (unprivileged) unless
//     Options.AllowPrivileged.
//
// The embedded server (Options.Embedded) runs processes as the invoking
// user: mixedRuntime when Docker answers, else processes alone (logged).
// agentID tells its jobs from other agents' (localAgentID).
func (s *Server) openLocalRuntime(ctx context.Context, dir, agentID string) (runtime.Runtime, api.DockerInfo, error) {
	if err := privateDataDirs(s.opts.DataDir, dir); err != nil {
		return nil, api.DockerInfo{}, err
	}
	o := agent.RuntimeOptions{Kind: s.opts.Runtime, DataDir: dir, AgentID: agentID, Logger: s.log,
		ShimCommand: s.opts.ShimCommand, ProcessWorkRoot: s.opts.ProcessWorkRoot}
	if s.opts.Embedded {
		rt, info, err := agent.OpenRuntime(ctx, o)
		if err != nil || s.opts.Runtime != "" || rt.Name() != agent.RuntimeDocker {
			return rt, info, err
		}
		p, err := process.New(process.Config{DataDir: filepath.Join(dir, "jobs"), AgentID: agentID, ShimCommand: s.opts.ShimCommand, WorkRoot: s.opts.ProcessWorkRoot})
		if err != nil {
			return nil, info, errors.Join(fmt.Errorf("process runtime: %w", err), rt.Close())
		}
		return &mixedRuntime{docker: rt, process: p, byJob: map[string]runtime.Runtime{}}, info, nil
	}
	switch s.opts.Runtime {
	case agent.RuntimeProcess:
		user, err := agent.ProcessRunAs(s.opts.ProcessUser, s.opts.ProcessAsServerUser)
		if err != nil {
			return nil, api.DockerInfo{}, err
		}
		if user == "" {
			s.log.Warn().Int("uid", os.Geteuid()).Msg("--process-as-server-user: process-runtime jobs run as this server's user and can read its data dir and state key")
		}
		o.ProcessUser = user
		return agent.OpenRuntime(ctx, o)
	case "", agent.RuntimeAuto, agent.RuntimeDocker:
		forced := s.opts.Runtime == agent.RuntimeDocker
		o.Kind = agent.RuntimeDocker
		rt, info, err := agent.OpenRuntime(ctx, o)
		if err == nil {
			if !s.opts.AllowPrivileged {
				rt = unprivileged{rt}
			}
			return rt, info, nil
		}
		if forced {
			return nil, info, err
		}
		info.Error = err.Error()
		s.log.Warn().Err(err).Msg("Docker is not reachable: the local agent fails every job until Docker runs and the server restarts (or the admin starts it with --runtime process)")
		return unreachableRuntime{err: err, processUser: cmp.Or(s.opts.ProcessUser, agent.DefaultProcessUser)}, info, nil
	default:
		return agent.OpenRuntime(ctx, o)
	}
}

// unprivileged refuses jobs with `privileged: true` on the server's own
// host: a privileged container is root there (it can mount the host's
// disks), that is, the server's privileges. Options.AllowPrivileged
// (--allow-privileged) is the admin's choice to allow them.
type unprivileged struct{ runtime.Runtime }

// Start refuses a privileged job with the fix, else starts it.
func (u unprivileged) Start(ctx context.Context, spec api.JobSpec, pulling func()) (runtime.Handle, error) {
	if spec.Privileged {
		return runtime.Handle{}, fmt.Errorf("job %s: privileged: true would be root on the server's own host; run it on another fleet's host, or have the admin start gpud serve --allow-privileged", spec.ID)
	}
	return u.Runtime.Start(ctx, spec, pulling)
}

// privateDataDirs makes the server's data dir and its agent's dir 0700
// (an existing one may have been made wider), so no other user, a job of
// the process runtime included, can enter them.
func privateDataDirs(dirs ...string) error {
	for _, d := range dirs {
		if err := os.Chmod(d, 0o700); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
	}
	return nil
}

// unreachableRuntime is the local agent's runtime on `gpud serve` when
// Docker did not answer at start and the admin chose no runtime: every
// job fails at start with a message that says what to do, as running user
// code as host processes is the admin's choice, not a fallback.
type unreachableRuntime struct {
	err         error
	processUser string
}

var _ runtime.Runtime = unreachableRuntime{}

// Name is "none": the instance shows that it runs nothing.
func (unreachableRuntime) Name() string { return "none" }

// Start fails with the fix.
func (u unreachableRuntime) Start(ctx context.Context, spec api.JobSpec, _ func()) (runtime.Handle, error) {
	return runtime.Handle{}, fmt.Errorf("job %s: Docker is not reachable on the server host (%v): start Docker and restart gpud serve, "+
		"or have the admin start gpud serve --runtime process, which runs jobs as processes of user %q", spec.ID, u.err, u.processUser)
}

func (u unreachableRuntime) errFor(h runtime.Handle) error {
	return fmt.Errorf("job %s: no runtime: Docker is not reachable on the server host (%v)", h.JobID, u.err)
}

// Wait fails: no job ever ran.
func (u unreachableRuntime) Wait(_ context.Context, h runtime.Handle) (runtime.Exit, error) {
	return runtime.Exit{}, fmt.Errorf("%w: %w", runtime.ErrExitUnknown, u.errFor(h))
}

// Stop fails: no job ever ran.
func (u unreachableRuntime) Stop(_ context.Context, h runtime.Handle, _ time.Duration) error {
	return u.errFor(h)
}

// Logs has nothing to return.
func (unreachableRuntime) Logs(context.Context, runtime.Handle, runtime.LogOptions, func(api.JobLogEntry) error) error {
	return nil
}

// Usage fails: no job ever ran.
func (u unreachableRuntime) Usage(_ context.Context, h runtime.Handle) (runtime.Usage, error) {
	return runtime.Usage{}, u.errFor(h)
}

// Adopt finds nothing.
func (unreachableRuntime) Adopt(context.Context) ([]runtime.Found, error) { return nil, nil }

// Remove has nothing to remove.
func (unreachableRuntime) Remove(context.Context, runtime.Handle) error { return nil }

// Close releases nothing.
func (unreachableRuntime) Close() error { return nil }

// Name reports both runtimes.
func (m *mixedRuntime) Name() string { return mixedName }

func (m *mixedRuntime) remember(jobID string, rt runtime.Runtime) {
	m.mu.Lock()
	m.byJob[jobID] = rt
	m.mu.Unlock()
}

func (m *mixedRuntime) of(h runtime.Handle) runtime.Runtime {
	m.mu.Lock()
	rt := m.byJob[h.JobID]
	m.mu.Unlock()
	if rt != nil {
		return rt
	}
	if strings.Contains(h.ID, ":") {
		return m.process
	}
	return m.docker
}

// Start runs spec in Docker when it names an image, else as a process.
func (m *mixedRuntime) Start(ctx context.Context, spec api.JobSpec, pulling func()) (runtime.Handle, error) {
	rt := m.docker
	if spec.Image == "" {
		rt = m.process
	}
	h, err := rt.Start(ctx, spec, pulling)
	if err == nil {
		m.remember(spec.ID, rt)
	}
	return h, err
}

// Wait waits in the job's runtime.
func (m *mixedRuntime) Wait(ctx context.Context, h runtime.Handle) (runtime.Exit, error) {
	return m.of(h).Wait(ctx, h)
}

// Stop stops the job in its runtime.
func (m *mixedRuntime) Stop(ctx context.Context, h runtime.Handle, grace time.Duration) error {
	return m.of(h).Stop(ctx, h, grace)
}

// Logs reads the job's output from its runtime.
func (m *mixedRuntime) Logs(ctx context.Context, h runtime.Handle, opts runtime.LogOptions, emit func(api.JobLogEntry) error) error {
	return m.of(h).Logs(ctx, h, opts, emit)
}

// Usage reads the job's use from its runtime.
func (m *mixedRuntime) Usage(ctx context.Context, h runtime.Handle) (runtime.Usage, error) {
	return m.of(h).Usage(ctx, h)
}

// Adopt lists the jobs of both runtimes and remembers where each is.
func (m *mixedRuntime) Adopt(ctx context.Context) ([]runtime.Found, error) {
	var all []runtime.Found
	for _, rt := range []runtime.Runtime{m.docker, m.process} {
		found, err := rt.Adopt(ctx)
		if err != nil {
			return nil, fmt.Errorf("adopt %s jobs: %w", rt.Name(), err)
		}
		for _, f := range found {
			m.remember(f.Handle.JobID, rt)
		}
		all = append(all, found...)
	}
	return all, nil
}

// Remove cleans the job up in its runtime and forgets it.
func (m *mixedRuntime) Remove(ctx context.Context, h runtime.Handle) error {
	err := m.of(h).Remove(ctx, h)
	if err == nil {
		m.mu.Lock()
		delete(m.byJob, h.JobID)
		m.mu.Unlock()
	}
	return err
}

// Close closes both runtimes; jobs keep running.
func (m *mixedRuntime) Close() error {
	return errors.Join(m.docker.Close(), m.process.Close())
}
