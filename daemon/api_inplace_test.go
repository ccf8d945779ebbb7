package daemon

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestReapplyWithANewPriorityUpdatesTheRunInPlace: re-applying a running
// run's configuration with only its priority changed updates the run (same
// run, same job, not restarted); any other change still needs force.
func TestReapplyWithANewPriorityUpdatesTheRunInPlace(t *testing.T) {
	ts := startServer(t, "1xH100:80GB")
	base := sleepTask("prio", "default", 1)
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(base+"priority: 10\n"), nil)
	var before api.Run
	testutil.Eventually(t, 30*time.Second, func() error {
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/prio", nil, &before)
		if before.Status != "running" {
			return fmt.Errorf("run is %s", before.Status)
		}
		return nil
	})
	var after api.Run
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(base+"priority: 90\n"), &after)
	if after.ID != before.ID || after.Priority != 90 || after.Status != "running" || len(after.Jobs) != 1 ||
		after.Jobs[0].ID != before.Jobs[0].ID || !after.Jobs[0].StartedAt.Equal(before.Jobs[0].StartedAt) {
		t.Fatalf("after the priority change: %+v\nbefore: %+v", after, before)
	}
	if got, _ := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(base+"priority: 90\nmax_duration: 1h\n"), nil); got != http.StatusConflict {
		t.Fatalf("another change without force: status %d, want 409", got)
	}
	var evs []api.Event
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/prio/events", nil, &evs)
	if last := evs[len(evs)-1]; last.Reason != "priority changed in place by admin" {
		t.Fatalf("last event: %+v", last)
	}
}
