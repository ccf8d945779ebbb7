package daemon

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestQueuesShareAndReclaimThroughTheAPI: two queues with a GPU quota of
// 2 each on a 4-GPU host. Queue a borrows b's idle quota; when b's runs
// arrive, reclaim stops a's borrowing runs, they wait with a reason, and
// the queue list shows fair shares and allocations.
func TestQueuesShareAndReclaimThroughTheAPI(t *testing.T) {
	ts := startServer(t, "4xH100:80GB")
	for _, q := range []string{"qa", "qb"} {
		cfg := fmt.Sprintf("type: queue\nname: %s\nquota:\n  gpu: 2\n", q)
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/queues/apply", api.ApplyRequest{ConfigurationYAML: cfg}, nil)
	}
	for i := range 5 {
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask(fmt.Sprintf("a%d", i), "qa", 1)), nil)
	}
	runs := func() map[string]api.Run {
		var list []api.Run
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs?all=true", nil, &list)
		out := map[string]api.Run{}
		for _, r := range list {
			out[r.Name] = r
		}
		return out
	}
	count := func(rs map[string]api.Run, status string) int {
		n := 0
		for _, r := range rs {
			if r.Status == status {
				n++
			}
		}
		return n
	}
	// Queue a borrows: 4 of its 5 runs hold all 4 GPUs, the fifth waits with a reason.
	testutil.Eventually(t, 30*time.Second, func() error {
		rs := runs()
		if n := count(rs, "running"); n != 4 {
			return fmt.Errorf("%d runs running, want 4: %v", n, rs)
		}
		for _, r := range rs {
			if r.Status == "pending" && r.WhyPending != "" {
				return nil
			}
		}
		return fmt.Errorf("no pending run with a why-pending reason")
	})
	for i := range 2 {
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask(fmt.Sprintf("b%d", i), "qb", 1)), nil)
	}
	// Reclaim: queue b gets its quota back from a's borrowing runs.
	testutil.Eventually(t, 60*time.Second, func() error {
		rs := runs()
		if rs["b0"].Status != "running" || rs["b1"].Status != "running" {
			return fmt.Errorf("b runs: %s (%s), %s (%s)", rs["b0"].Status, rs["b0"].WhyPending, rs["b1"].Status, rs["b1"].WhyPending)
		}
		return nil
	})
	var evs []api.Event
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/events", nil, &evs)
	reclaimed := 0
	for _, e := range evs {
		if e.Kind == "jobs" && e.Status == "terminating" && len(e.Reason) > 8 && e.Reason[:8] == "reclaim:" {
			reclaimed++
		}
	}
	if reclaimed < 2 {
		t.Fatalf("want at least 2 jobs reclaimed, events: %+v", evs)
	}
	var queues []api.Queue
	testutil.Eventually(t, 20*time.Second, func() error {
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/queues", nil, &queues)
		got := map[string]api.Queue{}
		for _, q := range queues {
			got[q.Name] = q
		}
		if got["qa"].Allocated.GPU != 2 || got["qb"].Allocated.GPU != 2 || got["qa"].FairShare.GPU < 2 || got["qb"].FairShare.GPU < 2 || got["qa"].Pending == 0 {
			return fmt.Errorf("queues: %+v", queues)
		}
		return nil
	})
	rs := runs()
	for _, r := range rs {
		if r.Status == "pending" && r.WhyPending == "" {
			t.Errorf("run %s pending without a reason", r.Name)
		}
	}
}

// TestParentWithoutQuotaDeservesItsChildrensQuotas: a grouping queue with
// no quota of its own deserves the sum of its children's quotas (as in
// `gpud sim`), so a non-preemptible run in a child with quota starts, and
// one beyond the child's quota waits with a reason.
func TestParentWithoutQuotaDeservesItsChildrensQuotas(t *testing.T) {
	ts := startServer(t, "4xH100:80GB")
	for _, cfg := range []string{
		"type: queue\nname: org\n",
		"type: queue\nname: team\nparent: org\nquota:\n  gpu: 2\n  cpu: 64\n  memory: 64GB\n",
	} {
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/queues/apply", api.ApplyRequest{ConfigurationYAML: cfg}, nil)
	}
	for i, gpus := range []int{2, 1} {
		cfg := sleepTask(fmt.Sprintf("np%d", i), "team", gpus) + "preemptible: false\n"
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(cfg), nil)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		var in, over api.Run
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/np0", nil, &in)
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/np1", nil, &over)
		if in.Status != "running" {
			return fmt.Errorf("np0 (within the quota) is %s: %s", in.Status, in.WhyPending)
		}
		if over.Status != "pending" || over.WhyPending == "" {
			return fmt.Errorf("np1 (beyond the quota) is %s, why pending %q", over.Status, over.WhyPending)
		}
		return nil
	})
}
