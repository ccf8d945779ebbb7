package daemon

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// TestFairShareSettingsReachTheSchedulerSnapshot: the usage window,
// half-life and k of time-based fair share were constants in the scheduler
// loop (7 days, 24 h, 1). They are server settings now: the defaults are
// unchanged, and set values reach the scheduler's snapshot (a negative
// half-life is no decay, KAI's default; a negative k turns the correction
// off) and the queue API's usage window.
func TestFairShareSettingsReachTheSchedulerSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want sched3
		// usage3d is whether a usage sample three days old shows in the
		// queue's usage (inside the window).
		usage3d bool
	}{
		{"defaults", Options{}, sched3{7 * 24 * time.Hour, 24 * time.Hour, 1}, true},
		{"set", Options{FairShareWindow: 48 * time.Hour, FairShareHalfLife: 6 * time.Hour, FairShareK: 2.5}, sched3{48 * time.Hour, 6 * time.Hour, 2.5}, false},
		{"no decay, no correction", Options{FairShareHalfLife: -1, FairShareK: -1}, sched3{7 * 24 * time.Hour, 0, 0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.NoLocalAgent = true
			ts := startServerWith(t, tc.opts)
			at := ts.now().Add(-72 * time.Hour)
			if _, err := ts.store.Apply(context.Background(), store.AddUsage(queueID("main", "default"), at, map[string]float64{"gpu": 3600})); err != nil {
				t.Fatal(err)
			}
			snap, _ := ts.scheduler.snapshot(ts.now())
			got := sched3{snap.Usage.Window, snap.Usage.HalfLife, snap.Usage.K}
			if got != tc.want {
				t.Fatalf("snapshot usage settings %+v, want %+v", got, tc.want)
			}
			if n := len(snap.Usage.Queues[queueID("main", "default")]); n != 1 {
				t.Fatalf("snapshot holds %d usage samples of the default queue, want 1", n)
			}
			var queues []api.Queue
			ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/queues", nil, &queues)
			for _, q := range queues {
				if q.Name == "default" && (q.Usage.GPU > 0) != tc.usage3d {
					t.Fatalf("queue usage %+v with window %s; a 3-day-old GPU hour shown: %v, want %v", q.Usage, tc.want.window, q.Usage.GPU > 0, tc.usage3d)
				}
			}
		})
	}
}

type sched3 struct {
	window, halfLife time.Duration
	k                float64
}

// TestBadFairShareSettingsFailTheStart: a window that is not positive
// would ignore all usage or none without saying so; New refuses it.
func TestBadFairShareSettingsFailTheStart(t *testing.T) {
	_, err := New(context.Background(), Options{DataDir: filepath.Join(t.TempDir(), "s"), Listen: "127.0.0.1:0", NoLocalAgent: true, FairShareWindow: -time.Hour})
	if err == nil || !strings.Contains(err.Error(), "fair-share window") {
		t.Fatalf("New with a negative fair-share window: %v, want it refused", err)
	}
}
