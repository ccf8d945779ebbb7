package plugins

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkPluginStartHandshake: start the external test plugin, negotiate
// the protocol (go-plugin handshake with automatic mTLS), send its
// configuration and read its Info, then shut it down: what `gpud backend
// add` and a restart after a crash cost before the first call.
func BenchmarkPluginStartHandshake(b *testing.B) {
	dir := buildTestPlugin(b, "")
	config := testConfig(b)
	var started time.Duration
	for b.Loop() {
		t0 := time.Now()
		sup, err := startTest(b, dir, config, SupervisorOptions{})
		if err != nil {
			b.Fatal(err)
		}
		started += time.Since(t0)
		sup.Close()
	}
	b.ReportMetric(float64(started.Milliseconds())/float64(b.N), "ms/start")
}

// BenchmarkOffersAcrossBackends: one offers query to every backend at once
// (as the server's offers do), for 1, 4 and 8 running plugins.
func BenchmarkOffersAcrossBackends(b *testing.B) {
	dir := buildTestPlugin(b, "")
	for _, n := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("backends=%d", n), func(b *testing.B) {
			var sups []*Supervisor
			for range n {
				sup, err := startTest(b, dir, testConfig(b), SupervisorOptions{})
				if err != nil {
					b.Fatal(err)
				}
				sups = append(sups, sup)
			}
			ctx := context.Background()
			offers := 0
			for b.Loop() {
				var wg sync.WaitGroup
				var mu sync.Mutex
				for _, s := range sups {
					wg.Go(func() {
						o, err := s.Offers(ctx, OfferQuery{})
						if err != nil {
							b.Error(err)
						}
						mu.Lock()
						offers += len(o)
						mu.Unlock()
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/query")
			b.ReportMetric(float64(offers)/float64(b.N), "offers/query")
		})
	}
}
