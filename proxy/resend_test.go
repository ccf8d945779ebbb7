package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// relayed hides a connection's socket, as the agent's port relay does: the
// gateway cannot peek at it before reuse.
type relayed struct{ net.Conn }

// TestGETsKeepAnsweringWhileAReplicaClosesItsConnectionsOrStops is the
// acceptance path "keeps serving while one replica is stopped" in small:
// replica a is reached through a relay (as the daemon's replicas are),
// b directly. First a closes every kept-alive connection between rounds
// of concurrent GETs (the gateway's pool of it is all stale); then a
// stops behind its relay, which still accepts a connection and closes it
// at once (the relay's far end is gone). Every GET gets 200, from a
// replica that answered it; a POST that reached the stopped replica is
// never sent twice.
func TestGETsKeepAnsweringWhileAReplicaClosesItsConnectionsOrStops(t *testing.T) {
	a, b := newBackend(t, "a", nil), newBackend(t, "b", nil)
	aAddr := strings.TrimPrefix(a.srv.URL, "http://")
	var stopped atomic.Bool
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dead.Close() })
	var deadConns atomic.Int64
	go func() { // the relay of a stopped replica: accepts, then closes
		for {
			c, err := dead.Accept()
			if err != nil {
				return
			}
			deadConns.Add(1)
			_, _ = c.Read(make([]byte, 1)) // the request arrives, no answer comes
			c.Close()
		}
	}()
	var d net.Dialer
	relay := Replica{ID: "a", Dial: func(ctx context.Context) (net.Conn, error) {
		addr := aAddr
		if stopped.Load() {
			addr = dead.Addr().String()
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return relayed{c}, nil
	}}
	res := newResolver(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{relay, b.replica()}, MinReplicas: 1})
	_, gw := newGateway(t, res, Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()

	round := func(phase string, n int) {
		t.Helper()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed []string
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n {
					resp, err := client.Get(gw.URL + "/proxy/services/p/s/x")
					if err != nil {
						mu.Lock()
						failed = append(failed, err.Error())
						mu.Unlock()
						continue
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || !(strings.HasPrefix(string(body), "a ") || strings.HasPrefix(string(body), "b ")) {
						mu.Lock()
						failed = append(failed, fmt.Sprintf("%d %s", resp.StatusCode, body))
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if len(failed) > 0 {
			t.Fatalf("%s: %d GETs failed, first: %s", phase, len(failed), failed[0])
		}
	}

	for i := range 5 {
		round(fmt.Sprintf("round %d", i), 10)
		// Between rounds the replica closes its idle kept-alive
		// connections (a keep-alive timeout, or a restart).
		a.srv.CloseClientConnections()
	}
	if a.hits.Load() == 0 || b.hits.Load() == 0 {
		t.Fatalf("a took %d, b %d: both should serve", a.hits.Load(), b.hits.Load())
	}

	stopped.Store(true)
	a.srv.Close()
	before := b.hits.Load()
	round("a stopped", 10)
	if got := b.hits.Load() - before; got != 80 {
		t.Errorf("b answered %d of 80 GETs after a stopped", got)
	}
	if deadConns.Load() == 0 {
		t.Errorf("no GET met the stopped replica's relay: the test proved nothing")
	}

	// A POST that reached the stopped replica's relay was not resent.
	only := newResolver(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{relay}, MinReplicas: 1})
	_, gw2 := newGateway(t, only, Options{})
	seen := deadConns.Load()
	resp, err := http.Post(gw2.URL+"/proxy/services/p/s/x", "text/plain", strings.NewReader("pay once"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || deadConns.Load() != seen+1 {
		t.Errorf("POST to a replica that closed without answering: %d after %d connections, want 502 after 1", resp.StatusCode, deadConns.Load()-seen)
	}
}
