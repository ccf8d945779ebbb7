package proxy

import (
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
