package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Front is the gateway's own HTTP/1.1 server for the client side: it
// owns the connections a listener accepts, reads their requests and
// serves the ones in a strict subset of HTTP/1.1 (front_parse.go) on the
// connection's own goroutine, with a ResponseWriter of its own
// (front_response.go), calling the same http.Handler that net/http would.
// What net/http's server pays per request and the front does not: a
// background read goroutine started and aborted for every request (the
// front watches for a client that left only once a request lasts
// frontWatchAfter), its futex wake-ups, and a second buffer before the
// connection's.
//
// Anything outside the subset — and every connection that negotiated h2
// in its TLS handshake — is handed over to net/http together with the
// bytes the front already read: the Front's http.Server serves a listener
// whose Accept yields those connections, so net/http's own rules judge
// them (upgrades, chunked or large bodies, Expect, HTTP/1.0, odd bytes).
//
// The http.Server gives the handler and the limits: ReadHeaderTimeout
// (for the head and the body the front reads), IdleTimeout (else
// ReadTimeout) between requests, WriteTimeout, ErrorLog, BaseContext and
// ConnContext. ConnState is not called for the front's connections.
type Front struct {
	srv     *http.Server
	handler http.Handler
	handoff *handoffListener

	serveOnce  sync.Once
	inShutdown atomic.Bool
	mu         sync.Mutex
	listeners  map[net.Listener]struct{}
	conns      map[*frontConn]struct{}
	baseCtx    context.Context
	scanning   atomic.Bool // the watch scanner runs (front_watch.go)
}

// NewFront returns a front for srv; srv serves what the front hands over
// and must not be served or shut down on its own (use the Front's Serve,
// Shutdown and Close).
func NewFront(srv *http.Server) *Front {
	f := &Front{srv: srv, handler: srv.Handler, listeners: map[net.Listener]struct{}{}, conns: map[*frontConn]struct{}{}}
	if f.handler == nil {
		f.handler = http.DefaultServeMux
	}
	f.handoff = &handoffListener{conns: make(chan net.Conn), done: make(chan struct{})}
	// A handed-over TLS connection reaches net/http as a replayConn, not
	// a *tls.Conn: its handler still sees r.TLS.
	connCtx := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if rc, ok := c.(*replayConn); ok && rc.tls != nil {
			ctx = context.WithValue(ctx, frontTLSKey{}, rc.tls)
		}
		if connCtx != nil {
			ctx = connCtx(ctx, c)
		}
		return ctx
	}
	h := f.handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			if st, ok := r.Context().Value(frontTLSKey{}).(*tls.ConnectionState); ok {
				r.TLS = st
			}
		}
		h.ServeHTTP(w, r)
	})
	return f
}

type frontTLSKey struct{}

// Server is the http.Server the front serves for.
func (f *Front) Server() *http.Server { return f.srv }

// Serve accepts connections on ln until Shutdown or Close (then it
// returns http.ErrServerClosed) or a failure of ln. A *tls.Conn from ln
// is handshaken by the front.
func (f *Front) Serve(ln net.Listener) error {
	if f.inShutdown.Load() {
		return http.ErrServerClosed
	}
	f.serveOnce.Do(func() {
		f.handoff.addr = ln.Addr()
		f.baseCtx = context.Background()
		if f.srv.BaseContext != nil {
			if ctx := f.srv.BaseContext(ln); ctx != nil {
				f.baseCtx = ctx
			}
		}
		go func() {
			if err := f.srv.Serve(f.handoff); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				f.logf("gateway front: the net/http server stopped: %v", err)
			}
		}()
	})
	f.mu.Lock()
	f.listeners[ln] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.listeners, ln)
		f.mu.Unlock()
	}()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if f.inShutdown.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				f.logf("gateway front: accept error: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		fc := f.newConn(c)
		if fc == nil {
			c.Close()
			continue
		}
		go fc.serve()
	}
}

// Shutdown stops accepting, closes idle connections and waits for the
// others to finish their request (they close after it), as
// http.Server.Shutdown does; the handed-over connections shut down with
// the http.Server.
func (f *Front) Shutdown(ctx context.Context) error {
	f.inShutdown.Store(true)
	f.closeListeners()
	errc := make(chan error, 1)
	go func() {
		err := f.srv.Shutdown(ctx)
		f.handoff.close() // had net/http not served it yet
		errc <- err
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if f.closeIdle() {
			return <-errc
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Close closes the listeners and every connection at once.
func (f *Front) Close() error {
	f.inShutdown.Store(true)
	f.closeListeners()
	f.mu.Lock()
	for c := range f.conns {
		c.c.Close()
	}
	f.mu.Unlock()
	err := f.srv.Close()
	f.handoff.close()
	return err
}

func (f *Front) closeListeners() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ln := range f.listeners {
		_ = ln.Close()
	}
	// The handed-over connections' listener closes with the http.Server
	// (its Shutdown or Close), which then knows it is closed.
}

// closeIdle closes the connections waiting for a request; true when none
// is left.
func (f *Front) closeIdle() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			c.c.Close()
		}
	}
	return len(f.conns) == 0
}

func (f *Front) logf(format string, args ...any) {
	if f.srv.ErrorLog != nil {
		f.srv.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

func (f *Front) newConn(c net.Conn) *frontConn {
	fc := &frontConn{f: f, c: c, remote: c.RemoteAddr().String()}
	fc.cr.c = c
	var w io.Writer = c
	if rio := newRawIO(c); rio != nil {
		fc.cr.r, w = rio, rio
	} else {
		fc.cr.r = c
	}
	fc.br = bufio.NewReaderSize(&fc.cr, frontMaxHead)
	fc.bw = bufio.NewWriterSize(w, 4<<10)
	fc.state.Store(stateIdle)
	ctx := context.WithValue(f.baseCtx, http.ServerContextKey, f.srv)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, c.LocalAddr())
	if f.srv.ConnContext != nil {
		if ctx = f.srv.ConnContext(ctx, c); ctx == nil {
			panic("ConnContext returned nil")
		}
	}
	fc.ctx = ctx
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inShutdown.Load() {
		return nil
	}
	f.conns[fc] = struct{}{}
	return fc
}

// Connection states: idle (waiting for a request: Shutdown may close
// it), active (a request is being read or served), closed.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

// frontConn is one client connection on the front.
type frontConn struct {
	f        *Front
	c        net.Conn
	cr       connReader // under br: gives the watcher's byte back
	br       *bufio.Reader
	bw       *bufio.Writer
	tls      *tls.ConnectionState
	ctx      context.Context
	remote   string
	state    atomic.Int32
	headBuf  []byte // lent to the answers' headers
	lastPOST bool   // the last request was a POST (leadingCRLF)
	pendBuf  []byte // lent to the answers' first body bytes

	// The watcher of a long request (front_watch.go).
	reqStart   atomic.Int64 // monotonic nanoseconds of the request's start; 0 between requests
	wstarted   bool
	wmu        sync.Mutex
	wended     bool
	wcancel    context.CancelFunc
	watching   chan struct{} // non-nil while the watcher reads
	clientGone atomic.Bool
}

// connReader reads the connection, first the byte the watcher read.
type connReader struct {
	c       net.Conn
	r       io.Reader // c, or its rawIO
	hasByte bool
	b       [1]byte
}

func (r *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.hasByte {
		r.hasByte = false
		p[0] = r.b[0]
		return 1, nil
	}
	return r.r.Read(p)
}

func (c *frontConn) serve() {
	handedOver := false
	defer func() {
		if handedOver {
			return
		}
		c.c.Close()
		c.state.Store(stateClosed)
		c.f.mu.Lock()
		delete(c.f.conns, c)
		c.f.mu.Unlock()
	}()
	srv := c.f.srv
	if tc, ok := c.c.(*tls.Conn); ok {
		if d := handshakeTimeout(srv); d > 0 {
			_ = c.c.SetDeadline(time.Now().Add(d))
		}
		if err := tc.HandshakeContext(c.ctx); err != nil {
			var re tls.RecordHeaderError
			if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
				// As net/http answers plain HTTP sent to its TLS port.
				_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
				return
			}
			c.f.logf("http: TLS handshake error from %s: %v", c.remote, err)
			return
		}
		_ = c.c.SetDeadline(time.Time{})
		st := tc.ConnectionState()
		c.tls = &st
		if p := st.NegotiatedProtocol; p != "" && p != "http/1.1" && p != "http/1.0" {
			handedOver = c.handOver() // h2, or acme-tls/1: net/http's TLSNextProto
			return
		}
	}
	for first := true; ; first = false {
		if c.br.Buffered() == 0 {
			if c.f.inShutdown.Load() {
				return
			}
			c.state.Store(stateIdle)
			if c.f.inShutdown.Load() {
				return
			}
			if d := srv.ReadHeaderTimeout; first && d > 0 {
				// A new connection has its head's time from the start,
				// as on net/http; a kept-alive one waits IdleTimeout.
				_ = c.c.SetReadDeadline(time.Now().Add(d))
			} else if d := idleTimeoutOf(srv); d > 0 {
				_ = c.c.SetReadDeadline(time.Now().Add(d))
			} else {
				_ = c.c.SetReadDeadline(time.Time{})
			}
			if _, err := c.br.Peek(1); err != nil {
				return
			}
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) && c.state.Load() != stateActive {
			return // Shutdown closed it
		}
		// The head's deadline, unless the head is whole in the buffer
		// already (most are, after the first read): then no read needs it.
		headDeadline := false
		if buf, _ := c.br.Peek(c.br.Buffered()); !headWhole(buf) || c.lastPOST {
			c.setHeadDeadline(srv)
			headDeadline = true
		}
		if c.lastPOST {
			// RFC 9112 2.2: a client may send a CRLF after a POST's body
			// (net/http skips up to four such bytes).
			peek, _ := c.br.Peek(4)
			_, _ = c.br.Discard(leadingCRLF(peek))
			c.lastPOST = false
		}
		n, err := c.readHead()
		if err != nil {
			if c.br.Buffered() > 0 && !errors.Is(err, os.ErrDeadlineExceeded) {
				handedOver = c.handOver() // net/http answers a cut head
			}
			return
		}
		if n == 0 {
			handedOver = c.handOver()
			return
		}
		head, _ := c.br.Peek(n)
		h, ok := parseHead(head)
		if !ok {
			handedOver = c.handOver()
			return
		}
		c.lastPOST = h.method == "POST"
		if _, err := c.br.Discard(n); err != nil {
			return
		}
		var body []byte
		var bodyErr error
		if h.contentLength > 0 && c.br.Buffered() < int(h.contentLength) && !headDeadline {
			c.setHeadDeadline(srv)
			headDeadline = true
		}
		if h.contentLength > 0 {
			// Whole before the handler, under the head's deadline (the
			// fast path's bodies are small; a larger one is net/http's).
			body = make([]byte, h.contentLength)
			var got int
			got, bodyErr = io.ReadFull(c.br, body)
			if bodyErr != nil {
				// The handler meets the error reading the body, as on
				// net/http; the connection closes after its answer.
				if errors.Is(bodyErr, io.EOF) {
					bodyErr = io.ErrUnexpectedEOF
				}
				body = body[:got]
			}
		}
		if headDeadline {
			_ = c.c.SetReadDeadline(time.Time{})
		}
		if !c.serveRequest(&h, body, bodyErr) || bodyErr != nil {
			return
		}
	}
}

// readHead reads until the buffer holds a whole head: its length, or 0
// when the request leaves the subset (too long, a bare LF) and must be
// handed over.
func (c *frontConn) readHead() (int, error) {
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		n, ok := headEnd(buf)
		if !ok {
			return 0, nil
		}
		if n > 0 {
			return n, nil
		}
		if len(buf) >= c.f.maxHead() {
			return 0, nil // net/http judges it, with its MaxHeaderBytes
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return 0, err
		}
	}
}

// serveRequest serves one request; false when the connection must close
// (or is no longer the front's).
func (c *frontConn) serveRequest(h *frontHead, body []byte, bodyErr error) (keep bool) {
	ctx, cancel := context.WithCancel(c.ctx)
	req := (&http.Request{
		Method:        h.method,
		URL:           h.url,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h.header,
		Host:          h.host,
		ContentLength: h.contentLength,
		Close:         h.close,
		RemoteAddr:    c.remote,
		RequestURI:    h.target,
		TLS:           c.tls,
		Body:          http.NoBody,
	}).WithContext(ctx)
	if len(body) > 0 || bodyErr != nil {
		req.Body = io.NopCloser(&byteReader{b: body, err: bodyErr})
	}
	if d := c.f.srv.WriteTimeout; d > 0 {
		_ = c.c.SetWriteDeadline(time.Now().Add(d))
	}
	if c.pendBuf == nil {
		c.pendBuf = make([]byte, 0, frontBuffered)
	}
	w := &frontResponse{c: c, req: req, header: make(http.Header), cl: -1, wantsClose: h.close, pending: c.pendBuf[:0]}
	c.startWatch(cancel)
	defer func() {
		if p := recover(); p != nil {
			c.stopWatch()
			cancel()
			if p != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.f.logf("http: panic serving %v: %v\n%s", c.remote, p, buf)
			}
			if !w.hijacked {
				_ = c.bw.Flush() // what was committed; the client sees the answer cut
			}
			keep = false
		}
	}()
	c.f.handler.ServeHTTP(w, req)
	c.stopWatch()
	if w.hijacked {
		cancel()
		c.forget()
		return false
	}
	w.finish()
	cancel()
	return !w.closeAfter && !c.clientGone.Load() && !c.f.inShutdown.Load()
}

// forget drops a hijacked connection from the front's.
func (c *frontConn) forget() {
	c.f.mu.Lock()
	delete(c.f.conns, c)
	c.f.mu.Unlock()
}

// byteReader is a request body the front read whole.
type byteReader struct {
	b   []byte
	err error // after b: nil for io.EOF
}

func (r *byteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func handshakeTimeout(srv *http.Server) time.Duration {
	var d time.Duration
	for _, v := range []time.Duration{srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout} {
		if v > 0 && (d == 0 || v < d) {
			d = v
		}
	}
	return d
}

func idleTimeoutOf(srv *http.Server) time.Duration {
	if srv.IdleTimeout != 0 {
		return srv.IdleTimeout
	}
	return srv.ReadTimeout
}

// leadingCRLF counts the CR and LF bytes that start b.
func leadingCRLF(b []byte) int {
	n := 0
	for n < len(b) && (b[n] == '\r' || b[n] == '\n') {
		n++
	}
	return n
}

// looksLikeHTTP says whether a TLS record header is the start of a
// plain HTTP request.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// setHeadDeadline bounds the reading of a request's head and body.
func (c *frontConn) setHeadDeadline(srv *http.Server) {
	if d := srv.ReadHeaderTimeout; d > 0 {
		_ = c.c.SetReadDeadline(time.Now().Add(d))
	} else if d := srv.ReadTimeout; d > 0 {
		_ = c.c.SetReadDeadline(time.Now().Add(d))
	} else {
		_ = c.c.SetReadDeadline(time.Time{})
	}
}

// headWhole says whether buf holds a whole head (or bytes that leave the
// subset at once).
func headWhole(buf []byte) bool {
	n, ok := headEnd(buf)
	return n > 0 || !ok
}

// maxHead is the longest head the front reads itself: frontMaxHead, or
// the server's MaxHeaderBytes when lower.
func (f *Front) maxHead() int {
	if m := f.srv.MaxHeaderBytes; m > 0 && m < frontMaxHead {
		return m
	}
	return frontMaxHead
}
