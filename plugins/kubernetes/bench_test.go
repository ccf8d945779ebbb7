package kubernetes

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// BenchmarkGang16ToRunning measures a 16-pod gang (one GPU each, over the
// two 8-GPU KWOK nodes) from StartGang to every job Running, through the
// real API server, the test cluster's binder and KWOK; Stop and the wait
// for the objects to go are outside the timer.
func BenchmarkGang16ToRunning(b *testing.B) {
	be, _ := newBackend(b)
	ctx := context.Background()
	var total time.Duration
	for i := 0; b.Loop(); i++ {
		g := plugins.Gang{ID: fmt.Sprintf("bench-%d", i)}
		for r := range 16 {
			g.Jobs = append(g.Jobs, job(fmt.Sprintf("bench-%d-%d", i, r), 1, "sleep infinity"))
		}
		start := time.Now()
		if err := be.StartGang(ctx, g); err != nil {
			b.Fatal(err)
		}
		waitRunning(b, be, g.ID, 16)
		total += time.Since(start)
		b.StopTimer()
		if err := be.Stop(ctx, g.ID, 0); err != nil {
			b.Fatal(err)
		}
		waitGone(b, be, g.ID)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-running/gang")
}

// waitRunning polls Status every 20ms (bounded by a minute).
func waitRunning(b *testing.B, be *Backend, gang string, n int) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		st, err := be.Status(context.Background(), gang)
		if err != nil {
			b.Fatal(err)
		}
		running := 0
		for _, s := range st {
			if s.State == api.JobRunning {
				running++
			}
		}
		if running == n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("gang %s not Running within a minute", gang)
}
