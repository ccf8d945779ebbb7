package slurm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/plugins/slurm"
	"gpud.dev/gpud/plugins/slurm/slurmtest"
)

// BenchmarkSubmitToRunning measures a 1-GPU gang from StartGang (the
// submit through slurmrestd) to its job reported running (Slurm's
// scheduler placed it, slurmd started the batch script and its srun
// step), on the real one-node test cluster; Stop and the wait for the
// node to be idle again (the last job's completing done) are outside the
// timer, so each submit finds the node free.
func BenchmarkSubmitToRunning(b *testing.B) {
	c := slurmtest.Find(b)
	be := newBackend(b, c, nil)
	ctx := context.Background()
	var total, submit time.Duration
	for i := 0; b.Loop(); i++ {
		g := plugins.Gang{ID: fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i), Jobs: []api.JobSpec{job(fmt.Sprintf("bench-%d", i), 1, "sleep 60")}}
		start := time.Now()
		if err := be.StartGang(ctx, g); err != nil {
			b.Fatal(err)
		}
		submit += time.Since(start)
		waitFor(b, be, g.ID, api.JobRunning)
		total += time.Since(start)
		b.StopTimer()
		if err := be.Stop(ctx, g.ID, 0); err != nil {
			b.Fatal(err)
		}
		waitFor(b, be, g.ID, api.JobTerminated)
		waitIdle(b, c)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-running/gang")
	b.ReportMetric(float64(submit.Milliseconds())/float64(b.N), "ms-submit/gang")
}

// waitFor polls Status every 20ms (bounded by a minute).
func waitFor(b *testing.B, be *slurm.Backend, gang string, want api.JobState) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		st, err := be.Status(context.Background(), gang)
		if err != nil {
			b.Fatal(err)
		}
		if len(st) == 1 && st[0].State == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("gang %s not %s within a minute", gang, want)
}

// waitIdle waits (a minute at most) for the test node to be idle.
func waitIdle(b *testing.B, c *slurmtest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		if out, err := c.Slurm(ctx, "", "sinfo", "-h", "-N", "-o", "%t"); err == nil && out == "idle" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatal("the test node is not idle within a minute")
}
