// Package mixed is the runtime that runs both kinds of job on one host:
// jobs with an image as Docker containers, image-less jobs
// (testdata/hello.yml) as plain processes, as the docker runtime cannot
// run a job without an image. It is the embedded laptop mode's runtime
// and `gpud agent --runtime mixed`'s.
//
// mixed must not import daemon, store, sched, plugins, proxy, nor the
// agent package.
package mixed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// Name is what a mixed runtime reports (job statuses, host info).
const Name = "docker+process"

// Runtime routes each job to one of two runtimes. Which runtime holds a
// job is remembered from Start and Adopt; a handle it has not seen is
// routed by its id's shape (the process runtime's ids are
// "<pid>:<ticks>", container ids have no colon). Safe for concurrent use.
type Runtime struct {
	docker, process runtime.Runtime

	mu    sync.Mutex
	byJob map[string]runtime.Runtime
}

var _ runtime.Runtime = (*Runtime)(nil)

// New runs image jobs in docker and image-less jobs in process; Close
// closes both.
func New(docker, process runtime.Runtime) *Runtime {
	return &Runtime{docker: docker, process: process, byJob: map[string]runtime.Runtime{}}
}

// Name reports both runtimes.
func (m *Runtime) Name() string { return Name }

func (m *Runtime) remember(jobID string, rt runtime.Runtime) {
	m.mu.Lock()
	m.byJob[jobID] = rt
	m.mu.Unlock()
}

func (m *Runtime) of(h runtime.Handle) runtime.Runtime {
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
func (m *Runtime) Start(ctx context.Context, spec api.JobSpec, pulling func()) (runtime.Handle, error) {
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

// Pythons are the process runtime's (its image-less jobs use the host's
// interpreters), if it lists them.
func (m *Runtime) Pythons() []string {
	if p, ok := m.process.(interface{ Pythons() []string }); ok {
		return p.Pythons()
	}
	return nil
}

// WorkRoot is the process runtime's directory of job working
// directories, if it has one ("" else).
func (m *Runtime) WorkRoot() string {
	if p, ok := m.process.(interface{ WorkRoot() string }); ok {
		return p.WorkRoot()
	}
	return ""
}

// Wait waits in the job's runtime.
func (m *Runtime) Wait(ctx context.Context, h runtime.Handle) (runtime.Exit, error) {
	return m.of(h).Wait(ctx, h)
}

// Stop stops the job in its runtime.
func (m *Runtime) Stop(ctx context.Context, h runtime.Handle, grace time.Duration) error {
	return m.of(h).Stop(ctx, h, grace)
}

// Logs reads the job's output from its runtime.
func (m *Runtime) Logs(ctx context.Context, h runtime.Handle, opts runtime.LogOptions, emit func(api.JobLogEntry) error) error {
	return m.of(h).Logs(ctx, h, opts, emit)
}

// Usage reads the job's use from its runtime.
func (m *Runtime) Usage(ctx context.Context, h runtime.Handle) (runtime.Usage, error) {
	return m.of(h).Usage(ctx, h)
}

// Adopt lists the jobs of both runtimes and remembers where each is.
func (m *Runtime) Adopt(ctx context.Context) ([]runtime.Found, error) {
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
func (m *Runtime) Remove(ctx context.Context, h runtime.Handle) error {
	err := m.of(h).Remove(ctx, h)
	if err == nil {
		m.mu.Lock()
		delete(m.byJob, h.JobID)
		m.mu.Unlock()
	}
	return err
}

// Close closes both runtimes; jobs keep running.
func (m *Runtime) Close() error {
	return errors.Join(m.docker.Close(), m.process.Close())
}
