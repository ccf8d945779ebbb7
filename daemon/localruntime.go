package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/agent/runtime/process"
	"gpud.dev/gpud/api"
)

// mixedName is what the local agent reports as its runtime when it runs
// both kinds of job.
const mixedName = "docker+process"

// mixedRuntime is the local agent's runtime when Docker is reachable and
// no runtime was forced: jobs with an image run as containers, image-less
// jobs (testdata/hello.yml) as plain processes, as the docker runtime
// cannot run a job without an image. Which runtime holds a job is
// remembered from Start and Adopt; a handle it has not seen is routed by
// its id's shape (the process runtime's ids are "<pid>:<ticks>").
type mixedRuntime struct {
	docker, process runtime.Runtime

	mu    sync.Mutex
	byJob map[string]runtime.Runtime
}

// openLocalRuntime opens the local agent's runtime: the forced kind when
// Options.Runtime is set, else Docker and processes side by side when the
// engine answers, else processes alone (OpenRuntime logs why). agentID
// tells its jobs from other agents' (localAgentID).
func (s *Server) openLocalRuntime(ctx context.Context, dir, agentID string) (runtime.Runtime, api.DockerInfo, error) {
	rt, info, err := agent.OpenRuntime(ctx, agent.RuntimeOptions{Kind: s.opts.Runtime, DataDir: dir, AgentID: agentID, Logger: s.log})
	if err != nil || s.opts.Runtime != "" || rt.Name() != agent.RuntimeDocker {
		return rt, info, err
	}
	p, err := process.New(process.Config{DataDir: filepath.Join(dir, "jobs"), AgentID: agentID, ShimCommand: s.opts.ShimCommand})
	if err != nil {
		_ = rt.Close()
		return nil, info, fmt.Errorf("process runtime: %w", err)
	}
	return &mixedRuntime{docker: rt, process: p, byJob: map[string]runtime.Runtime{}}, info, nil
}

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
