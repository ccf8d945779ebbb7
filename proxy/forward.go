package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"
)

// forward is what ServeService decided about one request, for the
// reverse proxy's Rewrite.
type forward struct {
	prefix    string // the path's part that named the service
	strip     bool   // strip_prefix: the replica does not see prefix
	stripAuth bool   // the Authorization header is the server's, not the service's
	// coldUntil, for a request that woke a service from zero, is until
	// when refused connections are retried: a replica that just started
	// may not listen yet.
	coldUntil time.Time
}

type forwardKey struct{}

// rewrite builds the request a replica sees: the path (stripped or not),
// the client's Host, X-Forwarded-*; never a server credential. The
// replica itself is chosen later, by RoundTrip.
func rewrite(pr *httputil.ProxyRequest) {
	f, _ := pr.In.Context().Value(forwardKey{}).(*forward)
	out := pr.Out
	out.URL.Scheme = "http"
	out.URL.Host = "replica" // RoundTrip sets the replica's
	out.Host = pr.In.Host
	if f != nil && f.strip {
		esc := strings.TrimPrefix(pr.In.URL.EscapedPath(), f.prefix)
		if esc == "" || esc[0] != '/' {
			esc = "/" + esc
		}
		if p, err := url.PathUnescape(esc); err == nil {
			out.URL.Path, out.URL.RawPath = p, esc
		} else { // cannot happen for an escaped path; keep the plain one
			out.URL.Path, out.URL.RawPath = "/"+strings.TrimLeft(strings.TrimPrefix(pr.In.URL.Path, f.prefix), "/"), ""
		}
	}
	if f == nil || f.stripAuth {
		out.Header.Del("Authorization")
	}
	pr.SetXForwarded()
}

// dialError marks a failure to connect to a replica: the request never
// reached it, so another replica may take it.
type dialError struct {
	replica string
	err     error
}

func (e *dialError) Error() string { return fmt.Sprintf("replica %s: %v", e.replica, e.err) }
func (e *dialError) Unwrap() error { return e.err }

// errNoReplica is a forward to a service whose snapshot holds no replica.
var errNoReplica = errors.New("the service has no replica")

// RoundTrip sends req to the least loaded replica. A request that never
// reached a replica (its connection failed, no byte of the body read),
// or that failed before any answer and may be sent again (idempotent, or
// not a byte of it sent: resendable), goes to the next one; a request
// that may have been processed is never sent twice.
func (st *serviceState) RoundTrip(req *http.Request) (*http.Response, error) {
	f, _ := req.Context().Value(forwardKey{}).(*forward)
	if fastEligible(req) {
		b, err := readBody(req)
		if err != nil {
			return nil, err
		}
		head := appendRequestHead(nil, req, len(b))
		return st.sendFast(req, f, head, b)
	}
	var body *trackedBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &trackedBody{ReadCloser: req.Body}
		req.Body = body
	}
	var tried []*replica
	var lastErr error = errNoReplica
	rounds := 0
	for {
		now := time.Now().UnixNano()
		rep := st.pick(tried, now)
		if rep == nil && len(tried) > 0 && !(body != nil && body.started) && st.holdCold(req, f, rounds+1) {
			rounds++
			tried = tried[:0]
			continue
		}
		if rep == nil {
			return nil, lastErr
		}
		rep.outstanding.Add(1)
		out := req.WithContext(req.Context())
		u := *req.URL
		u.Host = rep.hostKey
		out.URL = &u
		resp, err := rep.transport.RoundTrip(out)
		if err == nil {
			wrapBody(resp, rep)
			return resp, nil
		}
		rep.done()
		if !st.retryable(req, err, body) {
			return nil, err
		}
		st.failed(rep, now)
		tried = append(tried, rep)
		lastErr = err
	}
}

// sendFast sends a request rendered whole (head and body: the fast
// path, upstream.go) to the least loaded replica, with RoundTrip's
// rules: another replica when the request never reached one or may be
// resent, never when it may have been processed.
func (st *serviceState) sendFast(req *http.Request, f *forward, head, body []byte) (*http.Response, error) {
	var tried []*replica
	var lastErr error = errNoReplica
	rounds := 0
	for {
		now := time.Now().UnixNano()
		rep := st.pick(tried, now)
		if rep == nil && len(tried) > 0 && st.holdCold(req, f, rounds+1) {
			rounds++
			tried = tried[:0]
			continue
		}
		if rep == nil {
			return nil, lastErr
		}
		rep.outstanding.Add(1)
		resp, err := rep.fastRoundTrip(req, head, body)
		if err == nil {
			return resp, nil // its body releases rep
		}
		rep.done()
		if !st.retryable(req, err, nil) {
			return nil, err
		}
		st.failed(rep, now)
		tried = append(tried, rep)
		lastErr = err
	}
}

// failed passes over rep for a while after it refused a new connection,
// or closed one before answering: its idle connections are as dead.
func (st *serviceState) failed(rep *replica, now int64) {
	rep.pool.close(false)
	rep.transport.CloseIdleConnections()
	rep.downUntil.Store(now + int64(downFor))
	st.m.retries.Inc()
}

// retryable says whether a forward that failed with err may go to
// another replica: the request never reached one (a failed dial, no byte
// of a streamed body read), or the fast path's exchange failed before
// any answer and the request may be resent (resendable).
func (st *serviceState) retryable(req *http.Request, err error, body *trackedBody) bool {
	if req.Context().Err() != nil {
		return false
	}
	var de *dialError
	if errors.As(err, &de) {
		return body == nil || !body.started
	}
	_, ok := resendable(req, err)
	return ok
}

// holdCold waits before another round over the replicas of a service
// that is starting from zero, while its cold-start bound lasts; false
// when the request may not wait.
func (st *serviceState) holdCold(req *http.Request, f *forward, round int) bool {
	if f == nil || f.coldUntil.IsZero() {
		return false
	}
	wait := min(time.Duration(round)*50*time.Millisecond, time.Second)
	if time.Now().Add(wait).After(f.coldUntil) {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-req.Context().Done():
		return false
	case <-t.C:
		return true
	}
}

// proxyError answers a forward that failed: 503 when no replica could be
// reached, 502 when one failed mid-way; nothing when the client left.
func (st *serviceState) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		w.WriteHeader(499) // the client went away; counted, never seen
		return
	}
	var de *dialError
	switch {
	case errors.Is(err, errNoReplica):
		writeError(w, http.StatusServiceUnavailable, CodeNoReplica, "service %s has no ready replica", st.key)
	case errors.As(err, &de):
		writeError(w, http.StatusServiceUnavailable, CodeNoReplica, "service %s: no replica accepted the connection (%v)", st.key, err)
	default:
		writeError(w, http.StatusBadGateway, CodeBadGateway, "service %s: the replica failed to answer: %v", st.key, err)
	}
}

// trackedBody notes whether a transport read any of the request body.
type trackedBody struct {
	io.ReadCloser
	started bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	b.started = true
	return b.ReadCloser.Read(p)
}

// Close does not close the client's body: a transport closes it on a
// failed dial too, and the next replica still needs it. The server
// closes it when the request ends.
func (b *trackedBody) Close() error { return nil }

// wrapBody counts the request outstanding on rep until its response body
// is closed (the end of a stream or of a WebSocket included).
func wrapBody(resp *http.Response, rep *replica) {
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
		// A 101 upgrade: the reverse proxy needs the writable side.
		resp.Body = &countedConn{ReadWriteCloser: rwc, rep: rep}
		return
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, rep: rep}
}

type countedBody struct {
	io.ReadCloser
	rep  *replica
	once bool
}

// Read releases the replica at the body's end, before the client has
// the whole response, so its next request sees the replica idle.
func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.release()
	}
	return n, err
}

func (b *countedBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

func (b *countedBody) release() {
	if !b.once {
		b.once = true
		b.rep.done()
	}
}

type countedConn struct {
	io.ReadWriteCloser
	rep  *replica
	once bool
}

func (c *countedConn) Close() error {
	err := c.ReadWriteCloser.Close()
	if !c.once {
		c.once = true
		c.rep.done()
	}
	return err
}

// statusRecorder remembers the status a response was sent with, for the
// metrics; it unwraps for http.ResponseController (flush, hijack).
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 || s.status < 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

var _ http.RoundTripper = (*serviceState)(nil)
