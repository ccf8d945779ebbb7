package tunnel

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/internal/testutil"
)

// BenchmarkMemoryPerRegisteredHost measures the heap per registered host
// with n agents connected over TLS + yamux to one acceptor. Both ends run
// in this process, so the figure is an upper bound of the server's share.
//
//	go test -run '^$' -bench MemoryPerRegisteredHost -benchtime 1x ./agent/tunnel/
func BenchmarkMemoryPerRegisteredHost(b *testing.B) {
	const n = 50
	var perHost float64
	ac, tokens, srv, tcfg := testServer(b)
	tok, _, err := tokens.Issue("f")
	if err != nil {
		b.Fatal(err)
	}
	key := hostKey(b)
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ctx, cancel := context.WithCancel(context.Background())
		ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })
		for i := range n {
			cfg := Config{ServerURL: srv.URL, Token: tok, Host: fmt.Sprint("h", i), AgentToken: "x", Handler: ok, TLS: tcfg, Logger: zerolog.Nop(), Key: key}
			go Serve(ctx, cfg)
		}
		testutil.Eventually(b, 30*time.Second, func() error {
			if got := len(ac.Agents()); got != n {
				return testutil.Errorf("%d of %d registered", got, n)
			}
			return nil
		})
		runtime.GC()
		runtime.ReadMemStats(&after)
		perHost += float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n / 1024
		cancel()
		testutil.Eventually(b, 30*time.Second, func() error {
			if got := len(ac.Agents()); got != 0 {
				return testutil.Errorf("%d still registered", got)
			}
			return nil
		})
	}
	b.ReportMetric(perHost/float64(b.N), "KiB-heap/host")
}
