package daemon

import (
	"math"
	"testing"
	"time"
)

// TestRunCostIsItsJobsShareOfTheirOffersPriceTimesHowLongTheyRan: the
// test backend offers 8 A100s for $12/h; a run on 2 of them is priced at
// $3/h, and its cost once finished is that price times how long its job
// ran, the same on every read (nothing counted after the end). A run on
// an own host (the server's local agent) costs nothing.
func TestRunCostIsItsJobsShareOfTheirOffersPriceTimesHowLongTheyRan(t *testing.T) {
	ts := startBackendServer(t, 8)
	ts.submit("type: task\nname: priced\ncommands: [sleep 1]\nresources:\n  gpu: A100:2\n")
	r := ts.waitRun("priced", "done", "", 2*time.Minute)
	if len(r.Jobs) != 1 {
		t.Fatalf("jobs: %+v", r.Jobs)
	}
	j := r.Jobs[0]
	if j.Price != 3 {
		t.Fatalf("job price = %v $/h, want 3 (2 of the offer's 8 GPUs at $12/h)", j.Price)
	}
	if j.StartedAt.IsZero() || j.FinishedAt.IsZero() {
		t.Fatalf("job times: %+v", j)
	}
	want := 3 * j.FinishedAt.Sub(j.StartedAt).Hours()
	if want <= 0 || math.Abs(r.Cost-want) > 1e-9 || math.Abs(j.Cost-want) > 1e-9 {
		t.Fatalf("cost: run %v, job %v; want %v (price × %v)", r.Cost, j.Cost, want, j.FinishedAt.Sub(j.StartedAt))
	}
	time.Sleep(50 * time.Millisecond) // a finished run's cost must not grow
	if again := ts.getRun("priced"); again.Cost != r.Cost {
		t.Fatalf("a finished run's cost moved: %v, then %v", r.Cost, again.Cost)
	}

	own := startServer(t, "")
	own.submit("type: task\nname: owned\ncommands: [true]\n")
	if r := own.waitRun("owned", "done", "", time.Minute); r.Cost != 0 || r.Jobs[0].Price != 0 {
		t.Fatalf("a run on an own host costs %v (job price %v), want 0", r.Cost, r.Jobs[0].Price)
	}
	var raw map[string]any
	own.must(200, own.admin, "GET", "/api/v1/projects/main/runs/owned", nil, &raw)
	if _, ok := raw["cost"]; !ok {
		t.Fatalf("the run's JSON has no cost field: %v", raw)
	}
}
