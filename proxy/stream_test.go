package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSSEFirstEventArrivesBeforeTheReplicaFinishes: an event the replica
// flushed reaches the client while the replica still holds the response
// open (no buffering in the gateway).
func TestSSEFirstEventArrivesBeforeTheReplicaFinishes(t *testing.T) {
	finish := make(chan struct{})
	b := newBackend(t, "sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-finish
		fmt.Fprint(w, "data: last\n\n")
	})
	res := newResolver(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{b.replica()}, MinReplicas: 1})
	_, gw := newGateway(t, res, Options{})
	resp, err := http.Get(gw.URL + "/proxy/services/p/s/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event: %q %v", line, err)
	}
	close(finish) // only now may the replica end the response
	rest, err := io.ReadAll(rd)
	if err != nil || !strings.Contains(string(rest), "data: last") {
		t.Errorf("the rest of the stream: %q %v", rest, err)
	}
}

// TestWebSocketUpgradeEchoes: an Upgrade request reaches the replica, its
// 101 comes back, and bytes flow both ways over the connection.
func TestWebSocketUpgradeEchoes(t *testing.T) {
	b := newBackend(t, "ws", func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "upgrade expected", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		if brw.Flush() != nil {
			return
		}
		_, _ = io.Copy(conn, brw) // echo until the client closes
	})
	res := newResolver(&Service{Project: "p", Run: "s", Hosts: []string{"ws.example.test"}, Replicas: []Replica{b.replica()}, MinReplicas: 1})
	g, gw := newGateway(t, res, Options{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(conn, "GET /socket HTTP/1.1\r\nHost: ws.example.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	rd := bufio.NewReader(conn)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	for _, msg := range []string{"hello", "again"} {
		if _, err := fmt.Fprint(conn, msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(rd, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo of %q: %q %v", msg, buf, err)
		}
	}
	if g.InFlight("p/s") != 1 {
		t.Errorf("an open WebSocket counts %d in flight, want 1", g.InFlight("p/s"))
	}
	conn.Close()
	waitFor(t, func() bool { return g.InFlight("p/s") == 0 })
}

// TestAClientThatLeavesReleasesTheReplica: a client that gives up while
// the replica still thinks makes the gateway drop its request to the
// replica (the replica's request context ends), not hold it open.
func TestAClientThatLeavesReleasesTheReplica(t *testing.T) {
	arrived, released := make(chan struct{}), make(chan struct{})
	b := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // as a model server reads its request, then thinks
		close(arrived)
		<-r.Context().Done() // ends when the gateway closes the connection
		close(released)
	})
	res := newResolver(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{b.replica()}, MinReplicas: 1})
	g, gw := newGateway(t, res, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, "POST", gw.URL+"/proxy/services/p/s/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			done <- err
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-arrived
	cancel()
	select {
	case <-released:
	case <-time.After(30 * time.Second):
		t.Fatal("the replica still holds the request 30 s after its client left")
	}
	if err := <-done; err == nil {
		t.Error("the client's request succeeded after it was cancelled")
	}
	waitFor(t, func() bool { return g.InFlight("p/s") == 0 })
}

// TestAClientThatLeavesAStreamReleasesTheReplica: a client that closes
// an SSE stream midway makes the gateway close the replica's connection.
func TestAClientThatLeavesAStreamReleasesTheReplica(t *testing.T) {
	released := make(chan struct{})
	b := newBackend(t, "stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(released)
	})
	res := newResolver(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{b.replica()}, MinReplicas: 1})
	_, gw := newGateway(t, res, Options{})
	resp, err := http.Get(gw.URL + "/proxy/services/p/s/events")
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "data: first\n" {
		t.Fatalf("first event: %q %v", line, err)
	}
	resp.Body.Close() // the client leaves mid-stream
	select {
	case <-released:
	case <-time.After(30 * time.Second):
		t.Fatal("the replica still streams 30 s after its client left")
	}
}
