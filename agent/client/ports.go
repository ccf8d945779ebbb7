package client

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"gpud.dev/gpud/api"
)

// DialPort opens one TCP connection, relayed by the agent, to the port
// job jobID publishes for containerPort on the agent's host (GET
// /api/v1/jobs/{id}/ports/{port}, upgraded to api.PortProtocol). The agent
// refuses a port the job does not publish (400) and an unknown job (404);
// the error is then an *Error with that status.
func (c *Client) DialPort(ctx context.Context, jobID string, containerPort int) (net.Conn, error) {
	rwc, err := c.upgrade(ctx, "/api/v1/jobs/"+url.PathEscape(jobID)+"/ports/"+strconv.Itoa(containerPort),
		api.PortProtocol, fmt.Sprintf("agent port relay %s:%d", jobID, containerPort), nil)
	if err != nil {
		return nil, err
	}
	addr := relayAddr(jobID + "/" + strconv.Itoa(containerPort))
	return &relayConn{rwc: rwc, remote: addr}, nil
}

// relayAddr names a relayed connection's far end: the job and its port.
type relayAddr string

func (a relayAddr) Network() string { return "gpud-relay" }
func (a relayAddr) String() string  { return string(a) }

// relayConn is an upgraded relay stream as a net.Conn. The stream offers
// no deadlines of its own: a read or write deadline that passes closes
// the stream, and every later read or write fails with
// os.ErrDeadlineExceeded, so a caller's timeout still ends a stuck call
// (the connection is not usable after it, unlike a socket's).
type relayConn struct {
	rwc    io.ReadWriteCloser
	remote relayAddr

	mu      sync.Mutex
	timers  [2]*time.Timer // read, write
	expired bool
	once    sync.Once
	err     error
}

var _ net.Conn = (*relayConn)(nil)

func (c *relayConn) Read(p []byte) (int, error) {
	if c.isExpired() {
		return 0, os.ErrDeadlineExceeded
	}
	n, err := c.rwc.Read(p)
	return n, c.mapErr(err)
}

func (c *relayConn) Write(p []byte) (int, error) {
	if c.isExpired() {
		return 0, os.ErrDeadlineExceeded
	}
	n, err := c.rwc.Write(p)
	return n, c.mapErr(err)
}

func (c *relayConn) isExpired() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.expired
}

func (c *relayConn) mapErr(err error) error {
	if err != nil && c.isExpired() {
		return os.ErrDeadlineExceeded
	}
	return err
}

// Close ends the stream, and with it the relayed TCP connection.
func (c *relayConn) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		for _, t := range c.timers {
			if t != nil {
				t.Stop()
			}
		}
		c.mu.Unlock()
		c.err = c.rwc.Close()
	})
	return c.err
}

func (c *relayConn) LocalAddr() net.Addr  { return relayAddr("gateway") }
func (c *relayConn) RemoteAddr() net.Addr { return c.remote }

func (c *relayConn) SetDeadline(t time.Time) error {
	c.setDeadline(0, t)
	c.setDeadline(1, t)
	return nil
}
func (c *relayConn) SetReadDeadline(t time.Time) error  { c.setDeadline(0, t); return nil }
func (c *relayConn) SetWriteDeadline(t time.Time) error { c.setDeadline(1, t); return nil }

// setDeadline arms direction i's deadline at t (the zero time disarms it).
func (c *relayConn) setDeadline(i int, t time.Time) {
	c.mu.Lock()
	if c.timers[i] != nil {
		c.timers[i].Stop()
		c.timers[i] = nil
	}
	if t.IsZero() || c.expired {
		c.mu.Unlock()
		return
	}
	d := time.Until(t)
	if d > 0 {
		c.timers[i] = time.AfterFunc(d, c.expire)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.expire()
}

func (c *relayConn) expire() {
	c.mu.Lock()
	c.expired = true
	c.mu.Unlock()
	_ = c.Close()
}
