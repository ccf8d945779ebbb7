package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gpud.dev/gpud/internal/testutil"
)

// startFront serves h on a Front with srv's settings; it is closed when
// the test ends.
func startFront(t *testing.T, srv *http.Server, ln net.Listener) (*Front, string) {
	t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	f := NewFront(srv)
	done := make(chan error, 1)
	go func() { done <- f.Serve(ln) }()
	t.Cleanup(func() {
		_ = f.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return f, ln.Addr().String()
}

// closedWithin reads c until the server closes it; false when it is
// still open after d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// TestFrontClosesSlowHeadsAndIdleConnections: a head that does not come
// whole within ReadHeaderTimeout (slowloris) and a kept-alive connection
// idle past IdleTimeout are closed; a connection in use is not.
func TestFrontClosesSlowHeadsAndIdleConnections(t *testing.T) {
	_, addr := startFront(t, &http.Server{Handler: echoHandler(nil), ReadHeaderTimeout: 300 * time.Millisecond,
		IdleTimeout: 300 * time.Millisecond}, nil)

	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := io.WriteString(slow, "GET / HTTP/1.1\r\nHost: a\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(slow, 10*time.Second) {
		t.Error("a head that never ends kept its connection past ReadHeaderTimeout")
	}

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := io.WriteString(idle, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if !closedWithin(idle, 10*time.Second) {
		t.Error("an idle kept-alive connection stayed open past IdleTimeout")
	}
}

// TestFrontShutdownWaitsForRequestsAndClosesIdleConnections: Shutdown
// closes idle connections at once, lets a request in progress finish
// (its answer says Connection: close) and a handed-over one too, and
// Serve returns http.ErrServerClosed.
func TestFrontShutdownWaitsForRequestsAndClosesIdleConnections(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started.Add(1)
			<-release
		}
		_, _ = io.WriteString(w, "done "+r.URL.Path)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := NewFront(&http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second})
	served := make(chan error, 1)
	go func() { served <- f.Serve(ln) }()
	addr := ln.Addr().String()

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	slow := func(payload string) chan string {
		got := make(chan string, 1)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, payload); err != nil {
			t.Fatal(err)
		}
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				got <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			got <- string(b) + " close=" + map[bool]string{true: "yes", false: "no"}[resp.Close]
		}()
		return got
	}
	onFront := slow("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	handedOver := slow("POST /slow HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := started.Load(); n != 2 {
			return fmt.Errorf("%d of 2 requests reached the handler", n)
		}
		return nil
	})

	shut := make(chan error, 1)
	go func() { shut <- f.Shutdown(context.Background()) }()
	if !closedWithin(idle, 10*time.Second) {
		t.Error("Shutdown left an idle connection open")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v while requests were in progress", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if got := <-onFront; got != "done /slow close=yes" {
		t.Errorf("the front's request in progress: %s", got)
	}
	if got := <-handedOver; !strings.HasPrefix(got, "done /slow") {
		t.Errorf("the handed-over request in progress: %s", got)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve after Shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("the listener still accepts after Shutdown")
	}
}

// TestFrontCancelsTheRequestOfAClientThatLeft: a handler waiting on its
// request's context learns that the client closed the connection, also
// after the head's deadline (ReadHeaderTimeout) has passed.
func TestFrontCancelsTheRequestOfAClientThatLeft(t *testing.T) {
	cancelled := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(30 * time.Second):
		}
	})
	f, addr := startFront(t, &http.Server{Handler: h, ReadHeaderTimeout: 200 * time.Millisecond}, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /wait HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	testutil.Eventually(t, 10*time.Second, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		for fc := range f.conns {
			fc.wmu.Lock()
			watching := fc.watching != nil
			fc.wmu.Unlock()
			if watching && time.Since(sent) > 400*time.Millisecond {
				return nil // watching, and the head's deadline is long past
			}
		}
		return errors.New("the connection is not watched yet, or the head's deadline has not passed")
	})
	c.Close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the request's context was not cancelled after the client left")
	}
}

// TestFrontHijack: a handler on the front may take the connection over,
// with the bytes the front had buffered.
func TestFrontHijack(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(*frontResponse); !ok {
			t.Error("not served by the front")
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = brw.Flush()
		line, _ := brw.ReadString('\n')
		_, _ = brw.WriteString(line)
		_ = brw.Flush()
	})
	_, addr := startFront(t, &http.Server{Handler: h}, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\nafter\n"); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil || !strings.HasSuffix(string(b), "hijackedafter\n") {
		t.Fatalf("hijacked exchange: %q %v", b, err)
	}
}

// TestFrontOverTLS: HTTP/1.1 after the handshake is the front's, with
// r.TLS; h2 goes to net/http as it is; a request the front hands over
// still sees r.TLS.
func TestFrontOverTLS(t *testing.T) {
	type seen struct {
		front bool
		proto string
		tls   bool
	}
	got := make(chan seen, 3)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, front := w.(*frontResponse)
		got <- seen{front: front, proto: r.Proto, tls: r.TLS != nil && r.TLS.HandshakeComplete}
		_, _ = io.WriteString(w, "ok")
	})
	ts := httptest.NewUnstartedServer(nil) // for its certificate
	cert := ts.TLS
	if cert == nil {
		ts.StartTLS()
		cert = ts.TLS
		ts.Close()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: cert.Certificates, NextProtos: []string{"h2", "http/1.1"}}
	_, addr := startFront(t, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, tls.NewListener(ln, conf))
	client := func(h2 bool) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	do := func(c *http.Client, req *http.Request) {
		t.Helper()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
	do(client(false), req)
	if s := <-got; !s.front || s.proto != "HTTP/1.1" || !s.tls {
		t.Errorf("HTTP/1.1 over TLS: %+v, want the front's with r.TLS", s)
	}
	req, _ = http.NewRequest("GET", "https://"+addr+"/", nil)
	do(client(true), req)
	if s := <-got; s.front || s.proto != "HTTP/2.0" || !s.tls {
		t.Errorf("h2: %+v, want net/http's HTTP/2.0 with r.TLS", s)
	}
	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	_ = plain.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(plain, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if b, _ := io.ReadAll(plain); !strings.HasPrefix(string(b), "HTTP/1.0 400 Bad Request") {
		t.Errorf("plain HTTP to the TLS port: %q, want net/http's 400", b)
	}
	req, _ = http.NewRequest("POST", "https://"+addr+"/", io.NopCloser(strings.NewReader("chunked")))
	req.ContentLength = -1 // chunked: outside the front's subset
	do(client(false), req)
	if s := <-got; s.front || s.proto != "HTTP/1.1" || !s.tls {
		t.Errorf("handed-over HTTP/1.1 over TLS: %+v, want net/http's with r.TLS", s)
	}
}
