package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The gateway's own HTTP/1.1 exchange with replicas, for the common
// request: no upgrade, no Expect, a body of known length up to
// fastMaxBody. The handler's goroutine writes the request and reads the
// answer on a pooled connection itself, where http.Transport hands each
// request to a writer and a reader goroutine per connection: on loopback
// those hand-offs are most of a proxy's added latency. Other requests
// (WebSocket upgrades, streamed or large uploads) go through the
// replica's http.Transport.

// fastMaxBody bounds the request bodies the fast path reads whole before
// sending them with the headers.
const fastMaxBody = 64 << 10

// maxIdlePerReplica bounds a replica's idle connections.
const maxIdlePerReplica = 1024

// peekAfter is how long a connection stays idle before its reuse first
// checks that the replica has not closed it (a syscall saved under load).
const peekAfter = 100 * time.Millisecond

// idleTimeout closes connections idle that long.
const idleTimeout = 90 * time.Second

// upConn is one keep-alive connection to a replica.
type upConn struct {
	conn   net.Conn
	raw    syscall.RawConn // nil when conn is no socket (a relayed stream)
	rio    *rawIO          // nil when conn is no socket
	br     *bufio.Reader
	bw     *bufio.Writer
	cw     countingWriter // under bw: what reached the connection
	idleAt time.Time
}

// countingWriter counts the bytes a connection accepted.
type countingWriter struct {
	w io.Writer
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += n
	return n, err
}

func newUpConn(c net.Conn) *upConn {
	var rw io.ReadWriter = c
	rio := newRawIO(c)
	if rio != nil {
		rw = rio // see rawIO: no sysmon wake-up per exchange
	}
	u := &upConn{conn: c, rio: rio, br: bufio.NewReaderSize(rw, 16<<10), cw: countingWriter{w: rw}}
	u.bw = bufio.NewWriterSize(&u.cw, 8<<10)
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			u.raw = raw
		}
	}
	return u
}

// alive checks, without blocking, that the replica has not closed an
// idle connection (an HTTP server closes idle keep-alive connections
// after a few seconds: uvicorn after 5).
// A request that cannot be sent twice always checks.
func (u *upConn) alive(now time.Time, check bool) bool {
	if u.br.Buffered() > 0 || now.Sub(u.idleAt) > idleTimeout {
		return false
	}
	idle := now.Sub(u.idleAt)
	if idle < peekAfter && !check {
		return true // just used: a server does not close that fast, and a replayable request is retried if it did
	}
	if u.raw == nil {
		return idle < time.Second // cannot peek: trust only a fresh one
	}
	ok := false
	err := u.raw.Read(func(fd uintptr) bool {
		ok = peekEmpty(fd)
		return true
	})
	return err == nil && ok
}

// connPool is a replica's idle connections, most recent last.
type connPool struct {
	mu     sync.Mutex
	idle   []*upConn
	closed bool
}

// get takes the most recently used idle connection that is still alive
// (check: always look, see alive).
func (p *connPool) get(now time.Time, check bool) *upConn {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if c.alive(now, check) {
			return c
		}
		c.conn.Close()
	}
}

func (p *connPool) put(c *upConn) {
	c.idleAt = time.Now()
	p.mu.Lock()
	if p.closed || len(p.idle) >= maxIdlePerReplica {
		p.mu.Unlock()
		c.conn.Close()
		return
	}
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// close closes the idle connections; with final, later ones too (the
// replica left the service).
func (p *connPool) close(final bool) {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	if final {
		p.closed = true
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.conn.Close()
	}
}

// fastEligible says whether req takes the fast path.
func fastEligible(req *http.Request) bool {
	return req.ContentLength >= 0 && req.ContentLength <= fastMaxBody && len(req.TransferEncoding) == 0 &&
		req.Header.Get("Upgrade") == "" && req.Header.Get("Expect") == ""
}

// readBody reads req's body whole (fastEligible bounds it).
func readBody(req *http.Request) ([]byte, error) {
	if req.ContentLength == 0 || req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	b := make([]byte, req.ContentLength)
	if _, err := io.ReadFull(req.Body, b); err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	return b, nil
}

// replayable says whether req may be sent again after a kept-alive
// connection turned out closed (as http.Transport decides).
func replayable(req *http.Request) bool {
	switch req.Method {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// errStale is a kept-alive connection the replica closed before it read
// the request.
var errStale = errors.New("the replica closed a kept-alive connection")

// unansweredError is an exchange that failed before a byte of the answer
// arrived: the replica closed the connection, or a write to it failed.
type unansweredError struct {
	err    error
	reused bool // on a kept-alive connection
	unsent bool // not a byte of the request reached the connection: the replica never read it
}

func (e *unansweredError) Error() string {
	if e.reused {
		return errStale.Error() + ": " + e.err.Error()
	}
	return "the replica closed the connection before answering: " + e.err.Error()
}

func (e *unansweredError) Unwrap() []error {
	if e.reused {
		return []error{errStale, e.err}
	}
	return []error{e.err}
}

// resendable says whether err, a failed exchange of req, may be sent
// again (on a new connection, to the same or another replica), as
// net/http's Transport decides for its kept-alive connections: the
// exchange failed before any byte of an answer, and either req is
// idempotent or not a byte of it left (the replica cannot have acted on
// it). A request that may have been processed is never resent.
func resendable(req *http.Request, err error) (*unansweredError, bool) {
	var ue *unansweredError
	if !errors.As(err, &ue) || req.Context().Err() != nil {
		return nil, false
	}
	return ue, ue.unsent || replayable(req)
}

// fastRoundTrip sends req with body on a connection to rep and reads the
// answer's head; its body streams from the connection, which goes back
// to the pool once read to the end. A pooled connection that fails
// before any answer (the replica closed it: a keep-alive timeout, or it
// stopped) empties the pool, and a request that may be resent goes again
// on a new connection; the caller (RoundTrip) takes a failure there to
// another replica.
func (rep *replica) fastRoundTrip(req *http.Request, head, body []byte) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		var c *upConn
		if attempt == 0 {
			c = rep.pool.get(time.Now(), !replayable(req))
		}
		reused := c != nil
		if c == nil {
			conn, err := rep.dial(req.Context())
			if err != nil {
				return nil, err
			}
			c = newUpConn(conn)
		}
		resp, err := rep.exchange(c, req, head, body, reused)
		if err != nil && reused {
			// The replica closed its idle connections: the others are
			// likely closed too.
			rep.pool.close(false)
			if _, ok := resendable(req, err); ok {
				continue
			}
		}
		return resp, err
	}
}

// exchange writes a request (its head and body, rendered) on c and reads
// the answer's head; req is the request the gateway serves (its context
// and method).
func (rep *replica) exchange(c *upConn, req *http.Request, head, body []byte, reused bool) (*http.Response, error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, error) {
		stop()
		c.conn.Close()
		return nil, err
	}
	c.cw.n = 0
	var err error
	if c.rio != nil && c.br.Buffered() == 0 && c.bw.Buffered() == 0 && len(head)+len(body) <= 16<<10 {
		// One write, then wait for the answer without a first read that
		// would find nothing (rawIO.sendThenWait).
		b := head
		if len(body) > 0 {
			b = append(head[:len(head):len(head)], body...)
		}
		var n int
		n, err = c.rio.sendThenWait(b)
		c.cw.n = n
		if err == nil && n < len(b) {
			_, _ = c.bw.Write(b[n:])
			err = c.bw.Flush()
		}
	} else {
		_, _ = c.bw.Write(head) // a write error stays in bw: Flush returns it
		_, _ = c.bw.Write(body)
		err = c.bw.Flush()
	}
	if err != nil {
		if ctx.Err() == nil {
			return fail(&unansweredError{err: err, reused: reused, unsent: c.cw.n == 0})
		}
		return fail(err)
	}
	// Not a byte of answer: the replica closed the connection (before
	// our request arrived, on a kept-alive one).
	if _, err := c.br.Peek(1); err != nil && ctx.Err() == nil {
		return fail(&unansweredError{err: err, reused: reused})
	}
	var resp *http.Response
	for {
		r, err := readResponse(c.br, req)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return fail(err)
		}
		if r.StatusCode >= 100 && r.StatusCode < 200 {
			if r.StatusCode == http.StatusSwitchingProtocols {
				return fail(errors.New("the replica switched protocols unasked"))
			}
			continue // 103 Early Hints and the like: the final answer follows
		}
		resp = r
		break
	}
	fb := &fastBody{ReadCloser: resp.Body, c: c, rep: rep, stop: stop, keep: !resp.Close && !req.Close}
	if resp.Body == http.NoBody {
		fb.finish(true)
		return resp, nil
	}
	resp.Body = fb
	return resp, nil
}

// reqWriteExclude are the headers appendRequestHead writes itself (or
// not).
var reqWriteExclude = map[string]bool{"Host": true, "User-Agent": true, "Content-Length": true, "Transfer-Encoding": true, "Trailer": true, "Connection": true}

// appendRequestHead renders req's head as HTTP/1.1 for a body of n
// bytes (a request the reverse proxy already rewrote).
func appendRequestHead(buf []byte, req *http.Request, n int) []byte {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	buf = append(buf, req.Method...)
	buf = append(buf, ' ')
	buf = append(buf, req.URL.RequestURI()...)
	buf = append(buf, " HTTP/1.1\r\nHost: "...)
	buf = append(buf, host...)
	buf = append(buf, "\r\n"...)
	if ua := req.Header.Get("User-Agent"); ua != "" {
		buf = appendHeader(buf, "User-Agent", ua)
	}
	if n > 0 || req.Method == "POST" || req.Method == "PUT" || req.Method == "PATCH" {
		buf = append(buf, "Content-Length: "...)
		buf = strconv.AppendInt(buf, int64(n), 10)
		buf = append(buf, "\r\n"...)
	}
	if req.Close {
		buf = append(buf, "Connection: close\r\n"...)
	}
	for k, vv := range req.Header {
		if reqWriteExclude[k] {
			continue
		}
		for _, v := range vv {
			buf = appendHeader(buf, k, v)
		}
	}
	return append(buf, "\r\n"...)
}

// appendHeader renders one header line; a line break in the value (only
// a handler's own header can hold one) becomes a space, as net/http
// writes it.
func appendHeader(buf []byte, k, v string) []byte {
	buf = append(buf, k...)
	buf = append(buf, ": "...)
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	buf = append(buf, strings.TrimSpace(v)...)
	return append(buf, "\r\n"...)
}

// fastBody is a fast-path answer's body: read to its end, its connection
// goes back to the pool; closed early, the connection is closed.
type fastBody struct {
	io.ReadCloser
	c    *upConn
	rep  *replica
	stop func() bool
	keep bool
	done bool
}

func (b *fastBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

func (b *fastBody) Close() error {
	b.finish(false)
	return nil
}

// finish releases the connection: back to the pool when the body was
// read whole, the exchange allows keep-alive and the request's context
// did not cut the connection; closed otherwise.
func (b *fastBody) finish(complete bool) {
	if b.done {
		return
	}
	b.done = true
	if b.stop() && complete && b.keep {
		b.rep.pool.put(b.c)
	} else {
		b.c.conn.Close()
	}
	b.rep.done()
}
