package mixed

import (
	"context"
	"fmt"
	"net"

	"gpud.dev/gpud/agent/runtime"
)

var _ runtime.Execer = (*Runtime)(nil)

// Exec runs req in the job through the runtime that started it.
func (m *Runtime) Exec(ctx context.Context, h runtime.Handle, req runtime.ExecRequest) (int, error) {
	e, ok := m.of(h).(runtime.Execer)
	if !ok {
		return -1, fmt.Errorf("job %s: the %s runtime cannot run commands in its jobs", h.JobID, m.of(h).Name())
	}
	return e.Exec(ctx, h, req)
}

var _ runtime.PortDialer = (*Runtime)(nil)

// DialJob connects to the job's port through the runtime that started it.
func (m *Runtime) DialJob(ctx context.Context, h runtime.Handle, port int) (net.Conn, error) {
	d, ok := m.of(h).(runtime.PortDialer)
	if !ok {
		return nil, fmt.Errorf("job %s: the %s runtime cannot forward ports into its jobs", h.JobID, m.of(h).Name())
	}
	return d.DialJob(ctx, h, port)
}
