package proxy

import (
	"crypto/tls"
	"net"
	"sync"
	"time"
)

// The hand-over of a connection the front does not serve to net/http:
// the bytes already read go with it (replayConn), through a listener
// that the Front's http.Server serves (handoffListener).

// handOver gives the connection, with the bytes read from it and not
// consumed, to net/http; false when net/http no longer takes any.
func (c *frontConn) handOver() bool {
	var pending []byte
	if n := c.br.Buffered(); n > 0 {
		b, _ := c.br.Peek(n)
		pending = append(pending, b...)
	}
	if c.cr.hasByte {
		pending = append(pending, c.cr.b[0])
	}
	_ = c.c.SetDeadline(time.Time{})
	c.f.mu.Lock()
	delete(c.f.conns, c)
	c.f.mu.Unlock()
	// A connection handed over untouched (h2 after the handshake) goes
	// as it is: net/http sees its *tls.Conn.
	var conn net.Conn = c.c
	if len(pending) > 0 {
		conn = &replayConn{Conn: c.c, pending: pending, tls: c.tls}
	}
	if !c.f.handoff.push(conn) {
		c.c.Close()
	}
	return true
}

// replayConn is a handed-over connection: its first reads return the
// bytes the front had read.
type replayConn struct {
	net.Conn
	pending []byte
	tls     *tls.ConnectionState
}

func (r *replayConn) Read(p []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	return r.Conn.Read(p)
}

// CloseWrite lets net/http half-close a TCP connection, as it does its
// own.
func (r *replayConn) CloseWrite() error {
	if cw, ok := r.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// handoffListener yields the front's handed-over connections to
// net/http's server.
type handoffListener struct {
	addr   net.Addr
	conns  chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Close() error {
	l.close()
	return nil
}

func (l *handoffListener) close() { l.closed.Do(func() { close(l.done) }) }

func (l *handoffListener) Addr() net.Addr { return l.addr }
