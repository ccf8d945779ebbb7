package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"strconv"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"gpud.dev/gpud/agent/runtime"
)

var _ runtime.PortDialer = (*Runtime)(nil)

// DialJob connects to port on the container's own loopback, where an
// IDE's server listens (127.0.0.1 inside the container): the socket is
// made inside the container's network namespace (setns on one locked
// thread, which needs the agent to be root), so it reaches what the job
// reaches at localhost and nothing of the host's.
func (r *Runtime) DialJob(ctx context.Context, h runtime.Handle, port int) (net.Conn, error) {
	ins, err := r.cli.ContainerInspect(ctx, h.ID, client.ContainerInspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", h.JobID, err)
	}
	if ins.Container.State == nil || ins.Container.State.Pid == 0 {
		return nil, fmt.Errorf("job %s: its container is not running", h.JobID)
	}
	conn, err := dialInNetns(ctx, ins.Container.State.Pid, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("job %s: port %d: %w", h.JobID, port, err)
	}
	return conn, nil
}

// dialInNetns opens the TCP socket to addr in the network namespace of
// process pid. The socket stays in the namespace it was made in, so only
// its creation needs the thread to switch; the thread switches back, and
// one that cannot is never reused (it stays locked and exits with the
// goroutine).
func dialInNetns(ctx context.Context, pid int, addr string) (net.Conn, error) {
	target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, err
	}
	defer target.Close()
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer own.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			done <- result{err: fmt.Errorf("enter the container's network namespace (the agent must be root): %w", err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if rerr := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); rerr != nil {
			// Leave the thread locked: it dies with this goroutine.
			if conn != nil {
				conn.Close()
			}
			done <- result{err: errors.Join(err, fmt.Errorf("return to the agent's network namespace: %w", rerr))}
			return
		}
		goruntime.UnlockOSThread()
		done <- result{conn, err}
	}()
	res := <-done
	return res.conn, res.err
}
