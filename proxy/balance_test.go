package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestLeastOutstandingRequestsAvoidsABusyReplica: while one replica holds
// a long request, every new request goes to the idle one; with both idle,
// requests alternate.
func TestLeastOutstandingRequestsAvoidsABusyReplica(t *testing.T) {
	release := make(chan struct{})
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
	}
	a, b := newBackend(t, "a", handler), newBackend(t, "b", handler)
	res := newResolver(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{a.replica(), b.replica()}, MinReplicas: 1})
	g, gw := newGateway(t, res, Options{})
	for range 10 {
		get(t, gw.URL+"/proxy/services/p/s/")
	}
	if a.hits.Load() != 5 || b.hits.Load() != 5 {
		t.Errorf("idle replicas took %d and %d of 10 requests, want 5 and 5", a.hits.Load(), b.hits.Load())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get(gw.URL + "/proxy/services/p/s/hold")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { return g.InFlight("p/s") == 1 && a.hits.Load()+b.hits.Load() == 11 })
	busy, idle := a, b
	if b.hits.Load() == 6 {
		busy, idle = b, a
	}
	for range 20 {
		get(t, gw.URL+"/proxy/services/p/s/")
	}
	if busy.hits.Load() != 6 || idle.hits.Load() != 25 {
		t.Errorf("with %s busy: %s took %d, %s took %d; want every new request on the idle one", busy.name, busy.name, busy.hits.Load(), idle.name, idle.hits.Load())
	}
	close(release)
	<-done
}

// TestRetriesOnlyRequestsThatNeverReachedAReplica: a replica that refuses
// connections is skipped and its requests go to another (never an
// error); a replica that takes a request and breaks it mid-way is not
// retried: that request fails with 502 and no other replica sees it.
func TestRetriesOnlyRequestsThatNeverReachedAReplica(t *testing.T) {
	good := newBackend(t, "good", nil)
	refused := closedPort(t)
	res := newResolver(&Service{Project: "p", Run: "s", StripPrefix: true,
		Replicas: []Replica{{ID: "refused", Addr: refused}, good.replica()}, MinReplicas: 1})
	_, gw := newGateway(t, res, Options{})
	for i := range 10 {
		resp, err := http.Post(gw.URL+"/proxy/services/p/s/x", "text/plain", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(string(b), "good") {
			t.Errorf("request %d with a refusing replica: %d %q", i, resp.StatusCode, b)
		}
	}

	var seen atomic.Int64
	breaker := newBackend(t, "breaker", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		seen.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // the request arrived; the answer never comes
		}
	})
	other := newBackend(t, "other", nil)
	res.set(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{breaker.replica(), other.replica()}, MinReplicas: 1})
	var ok, failed int
	for range 10 {
		resp, err := http.Post(gw.URL+"/proxy/services/p/s/x", "text/plain", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case 200:
			ok++
		case http.StatusBadGateway:
			failed++
		default:
			t.Errorf("unexpected status %d", resp.StatusCode)
		}
	}
	if failed == 0 || int64(failed) != seen.Load() || int64(ok) != other.hits.Load() {
		t.Errorf("%d failed (the breaker saw %d), %d ok (the other replica saw %d): a request that reached a replica was retried", failed, seen.Load(), ok, other.hits.Load())
	}
}

// TestAStoppedReplicaLeavesTheOtherServing: one of two replicas stops in
// the middle of a load; every request still gets an answer, and once the
// snapshot drops the stopped replica its pool is closed.
func TestAStoppedReplicaLeavesTheOtherServing(t *testing.T) {
	a, b := newBackend(t, "a", nil), newBackend(t, "b", nil)
	svc := &Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{a.replica(), b.replica()}, MinReplicas: 1}
	res := newResolver(svc)
	_, gw := newGateway(t, res, Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	var failures atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if w == 0 && i == 10 {
					a.srv.CloseClientConnections()
					a.srv.Listener.Close() // the replica stops: new connections are refused
				}
				resp, err := client.Get(gw.URL + "/proxy/services/p/s/")
				if err != nil {
					failures.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failures.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// Requests in flight on the stopped replica when it died may fail
	// (they had reached it); nothing after.
	if f := failures.Load(); f > 4 {
		t.Errorf("%d of 200 requests failed while one replica stopped", f)
	}
	before := b.hits.Load()
	for range 10 {
		if code, _, _ := get(t, gw.URL+"/proxy/services/p/s/"); code != 200 {
			t.Errorf("after the stop: %d", code)
		}
	}
	if b.hits.Load() != before+10 {
		t.Errorf("the remaining replica took %d of 10 requests", b.hits.Load()-before)
	}

	// A replica leaving the snapshot has its pool closed.
	c := newBackend(t, "c", nil)
	res.set(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{c.replica()}, MinReplicas: 1})
	get(t, gw.URL+"/proxy/services/p/s/")
	res.set(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{b.replica()}, MinReplicas: 1})
	get(t, gw.URL+"/proxy/services/p/s/")
	waitFor(t, func() bool { return c.closed.Load() >= 1 })
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestAKeptAliveConnectionTheReplicaClosedIsNotAnError: a replica that
// closes idle connections (without saying so in its answer, as servers do
// after their keep-alive timeout) never makes the gateway fail a request:
// a GET found on a closed connection is sent again, a POST is sent only
// on a connection checked open.
func TestAKeptAliveConnectionTheReplicaClosedIsNotAnError(t *testing.T) {
	var posts atomic.Int64
	closed := make(chan struct{}, 1)
	b := newBackend(t, "closer", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			posts.Add(1)
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		_ = brw.Flush()
		_ = conn.Close()
		closed <- struct{}{} // the next request finds the connection closed
	})
	res := newResolver(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{b.replica()}, MinReplicas: 1})
	_, gw := newGateway(t, res, Options{})
	for i := range 20 {
		if code, body, _ := get(t, gw.URL+"/proxy/services/p/s/"); code != 200 || body != "ok" {
			t.Fatalf("GET %d: %d %q", i, code, body)
		}
		<-closed
		resp, err := http.Post(gw.URL+"/proxy/services/p/s/", "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("POST %d: %d %q", i, resp.StatusCode, body)
		}
		<-closed
	}
	if posts.Load() != 20 {
		t.Errorf("the replica saw %d POSTs, want 20 (each once)", posts.Load())
	}
}

// TestALargeUploadStreamsThroughTheTransport: a body over the fast path's
// bound, or of unknown length, reaches the replica whole.
func TestALargeUploadStreamsThroughTheTransport(t *testing.T) {
	b := newBackend(t, "sink", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	})
	res := newResolver(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{b.replica()}, MinReplicas: 1})
	_, gw := newGateway(t, res, Options{})
	for _, size := range []int{fastMaxBody, fastMaxBody + 1, 5 << 20} {
		resp, err := http.Post(gw.URL+"/proxy/services/p/s/", "application/octet-stream", io.LimitReader(neverEnding('x'), int64(size)))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != fmt.Sprint(size) {
			t.Errorf("a %d-byte upload (chunked): %d %q", size, resp.StatusCode, body)
		}
	}
}

type neverEnding byte

func (b neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}
