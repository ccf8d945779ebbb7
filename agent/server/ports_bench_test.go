package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"gpud.dev/gpud/api"
)

// BenchmarkPortRelay measures what the agent's port relay adds to a
// request, side by side in one run: each iteration sends one GET straight
// to a backend on loopback and one through the relay (the agent API on
// loopback, upgraded to gpud-port/1, then the agent's own dial of the
// job's published port), and reports both latencies and their
// difference. keep-alive reuses one relayed connection, as the gateway's
// pools do; new-connection opens a relay per request (the first request
// of a pool, or a replica's first).
func BenchmarkPortRelay(b *testing.B) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := backend.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })}
	go func() { _ = srv.Serve(backend) }()
	b.Cleanup(func() { _ = srv.Close() })

	r := newHost(b, "process").start(b)
	ctx := context.Background()
	// The job publishes the backend's port: processes share the host's
	// network, so its published port is the backend's.
	s := api.JobSpec{ID: "svc", RunName: "run-svc", Commands: []string{"sleep 3600"}, StopDuration: time.Second, Ports: []api.JobPort{{Container: port}}}
	if _, err := r.cli.Start(ctx, s); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_, _ = r.cli.Stop(ctx, "svc")
		_, _ = r.cli.Wait(ctx, "svc")
	})
	relayDial := func(ctx context.Context, _, _ string) (net.Conn, error) { return r.cli.DialPort(ctx, "svc", port) }
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/"
	for _, c := range []struct {
		name      string
		keepAlive bool
	}{{"keep-alive", true}, {"new-connection", false}} {
		b.Run(c.name, func(b *testing.B) {
			direct := &http.Client{Transport: &http.Transport{DisableKeepAlives: !c.keepAlive}}
			relayed := &http.Client{Transport: &http.Transport{DisableKeepAlives: !c.keepAlive, DialContext: relayDial}}
			get := func(cl *http.Client) time.Duration {
				start := time.Now()
				resp, err := cl.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				return time.Since(start)
			}
			get(direct) // warm both pools
			get(relayed)
			var d, rl []time.Duration
			b.ResetTimer()
			for b.Loop() {
				d = append(d, get(direct))
				rl = append(rl, get(relayed))
			}
			b.StopTimer()
			us := func(x time.Duration) float64 { return float64(x) / float64(time.Microsecond) }
			slices.Sort(d)
			slices.Sort(rl)
			p := func(xs []time.Duration, q float64) time.Duration { return xs[int(q*float64(len(xs)-1))] }
			b.ReportMetric(us(p(d, 0.5)), "direct-p50-µs")
			b.ReportMetric(us(p(rl, 0.5)), "relay-p50-µs")
			b.ReportMetric(us(p(rl, 0.5)-p(d, 0.5)), "added-p50-µs")
			b.ReportMetric(us(p(rl, 0.99)-p(d, 0.99)), "added-p99-µs")
			direct.CloseIdleConnections()
			relayed.CloseIdleConnections()
		})
	}
}
