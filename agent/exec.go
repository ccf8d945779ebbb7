package agent

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// Exec runs req inside the running job id (see runtime.Execer) and
// returns the command's exit code. The command is killed when ctx ends or
// when the job ends.
func (a *Agent) Exec(ctx context.Context, id string, req runtime.ExecRequest) (int, error) {
	j, err := a.get(id)
	if err != nil {
		return -1, err
	}
	a.mu.Lock()
	h, state := j.rec.Handle, j.rec.Status.State
	a.mu.Unlock()
	if state != api.JobRunning || h.ID == "" {
		return -1, fmt.Errorf("job %s is %s, not running: %w", id, state, ErrInvalid)
	}
	e, ok := a.rt.(runtime.Execer)
	if !ok {
		return -1, fmt.Errorf("job %s: the %s runtime cannot run commands in its jobs: %w", id, a.rt.Name(), ErrInvalid)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-j.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return e.Exec(ctx, h, req)
}

// DialJob connects to port on the running job id's own loopback (see
// runtime.PortDialer), for SSH port forwarding.
func (a *Agent) DialJob(ctx context.Context, id string, port int) (net.Conn, error) {
	h, err := a.runningHandle(id)
	if err != nil {
		return nil, err
	}
	d, ok := a.rt.(runtime.PortDialer)
	if !ok {
		return nil, fmt.Errorf("job %s: the %s runtime cannot forward ports into its jobs: %w", id, a.rt.Name(), ErrInvalid)
	}
	return d.DialJob(ctx, h, port)
}

func (a *Agent) runningHandle(id string) (runtime.Handle, error) {
	j, err := a.get(id)
	if err != nil {
		return runtime.Handle{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if j.rec.Status.State != api.JobRunning || j.rec.Handle.ID == "" {
		return runtime.Handle{}, fmt.Errorf("job %s is %s, not running: %w", id, j.rec.Status.State, ErrInvalid)
	}
	return j.rec.Handle, nil
}

// SessionOpened counts an interactive (SSH) connection into job id until
// the returned function is called, for its status and inactivity
// policies.
func (a *Agent) SessionOpened(id string) (closed func()) { return a.sessions.begin(id) }

// Touch records activity in a session of job id (input from its client),
// for inactivity policies.
func (a *Agent) Touch(id string) { a.sessions.touch(id) }

// sessions counts each job's interactive sessions and their last activity.
type sessions struct {
	mu   sync.Mutex
	jobs map[string]*api.JobSessions
}

func (s *sessions) begin(id string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jobs == nil {
		s.jobs = map[string]*api.JobSessions{}
	}
	st := s.jobs[id]
	if st == nil {
		st = &api.JobSessions{}
		s.jobs[id] = st
	}
	st.Active++
	st.LastActivity = time.Now()
	return func() {
		s.mu.Lock()
		st.Active--
		st.LastActivity = time.Now()
		s.mu.Unlock()
	}
}

func (s *sessions) touch(id string) {
	s.mu.Lock()
	if st := s.jobs[id]; st != nil {
		st.LastActivity = time.Now()
	}
	s.mu.Unlock()
}

// of returns a copy of job id's sessions, nil when it never had one.
func (s *sessions) of(id string) *api.JobSessions {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.jobs[id]; st != nil {
		c := *st
		return &c
	}
	return nil
}

// Exec runs req through the wrapped runtime: commands in a job need no
// privilege check of their own (the job was checked at its start).
func (u unprivileged) Exec(ctx context.Context, h runtime.Handle, req runtime.ExecRequest) (int, error) {
	e, ok := u.Runtime.(runtime.Execer)
	if !ok {
		return -1, fmt.Errorf("job %s: the %s runtime cannot run commands in its jobs: %w", h.JobID, u.Name(), ErrInvalid)
	}
	return e.Exec(ctx, h, req)
}

// DialJob connects through the wrapped runtime.
func (u unprivileged) DialJob(ctx context.Context, h runtime.Handle, port int) (net.Conn, error) {
	d, ok := u.Runtime.(runtime.PortDialer)
	if !ok {
		return nil, fmt.Errorf("job %s: the %s runtime cannot forward ports into its jobs: %w", h.JobID, u.Name(), ErrInvalid)
	}
	return d.DialJob(ctx, h, port)
}
