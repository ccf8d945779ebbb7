package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// discardWriter is a ResponseWriter that keeps nothing: the benchmark
// counts the gateway's work, not a recorder's.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// BenchmarkGatewayForward is one GET through the gateway's handler, in
// process, to a replica on loopback: its allocations and CPU per request
// (the replica's own included; see BenchmarkGatewayVsNginxCaddy for the
// gateway as its own process).
//
//	go test ./proxy -run '^$' -bench BenchmarkGatewayForward -benchmem -cpuprofile /tmp/fwd.prof
func BenchmarkGatewayForward(b *testing.B) {
	backend := httptest.NewServer(benchBackend())
	defer backend.Close()
	g, err := New(newResolver(&Service{Project: "bench", Run: "svc", Hosts: []string{benchHost}, MinReplicas: 1,
		Replicas: []Replica{{ID: "backend", Addr: strings.TrimPrefix(backend.URL, "http://")}}}), Options{})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("GET", "http://"+benchHost+"/v1/health", nil)
	req.Header.Set("User-Agent", "bench")
	req.Header.Set("Accept", "*/*")
	req.RemoteAddr = "127.0.0.1:40000"
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		w := &discardWriter{h: http.Header{}}
		g.ServeHTTP(w, req)
	}
}

// BenchmarkFrontGateway is one GET on a kept-alive client connection
// through the gateway served by its Front, in process, to a replica on
// loopback: the front's and the gateway's allocations and CPU per
// request (the replica's and the client's own included).
//
//	go test ./proxy -run '^$' -bench BenchmarkFrontGateway -benchmem -memprofile /tmp/front.mem
func BenchmarkFrontGateway(b *testing.B) {
	backend := httptest.NewServer(benchBackend())
	defer backend.Close()
	g, err := New(newResolver(&Service{Project: "bench", Run: "svc", Hosts: []string{benchHost}, MinReplicas: 1,
		Replicas: []Replica{{ID: "backend", Addr: strings.TrimPrefix(backend.URL, "http://")}}}), Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv := serveOnFront(b, g)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte("GET /v1/health HTTP/1.1\r\nHost: " + benchHost + "\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	br := bufio.NewReader(c)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
			b.Fatal(resp.StatusCode, err)
		}
		resp.Body.Close()
	}
}
