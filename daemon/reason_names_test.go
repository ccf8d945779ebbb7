package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// TestReclaimedRunSaysWhoTookItBack: two queues with a GPU quota of 1 on
// a 2-GPU host; queue qa's two runs borrow qb's GPU until qb's run comes.
// The run reclaimed then waits saying, in run and queue names, that its
// queue is at its fair share and that run b0 of queue qb reclaimed it;
// the events name the runs and jobs, and no reason carries a run id.
func TestReclaimedRunSaysWhoTookItBack(t *testing.T) {
	ts := startServer(t, "2xH100:80GB")
	defer stopAllAndWait(t, ts)
	for _, q := range []string{"qa", "qb"} {
		cfg := fmt.Sprintf("type: queue\nname: %s\nquota:\n  gpu: 1\n", q)
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/queues/apply", api.ApplyRequest{ConfigurationYAML: cfg}, nil)
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
	for i := range 2 {
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask(fmt.Sprintf("a%d", i), "qa", 1)), nil)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if rs := runs(); rs["a0"].Status != "running" || rs["a1"].Status != "running" {
			return fmt.Errorf("a runs: %s, %s", rs["a0"].Status, rs["a1"].Status)
		}
		return nil
	})
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask("b0", "qb", 1)), nil)
	var victim api.Run
	testutil.Eventually(t, 60*time.Second, func() error {
		rs := runs()
		if rs["b0"].Status != "running" {
			return fmt.Errorf("b0 is %s: %s", rs["b0"].Status, rs["b0"].WhyPending)
		}
		for _, name := range []string{"a0", "a1"} {
			if r := rs[name]; r.Status == "pending" && strings.Contains(r.WhyPending, "reclaimed") {
				victim = r
				return nil
			}
		}
		return fmt.Errorf("no a run pending after a reclaim: a0 %s (%s), a1 %s (%s)", rs["a0"].Status, rs["a0"].WhyPending, rs["a1"].Status, rs["a1"].WhyPending)
	})
	t.Logf("%s: %s — %s", victim.Name, victim.Status, victim.WhyPending)
	for _, want := range []string{"reclaimed by run b0 of queue qb", "queue qa would go over its fair share"} {
		if !strings.Contains(victim.WhyPending, want) {
			t.Errorf("%s waits with %q, want it to say %q", victim.Name, victim.WhyPending, want)
		}
	}
	ids := map[string]string{}
	for _, r := range runs() {
		ids[r.ID] = r.Name
	}
	noIDs := func(what, text string) {
		for id, name := range ids {
			if strings.Contains(text, id) {
				t.Errorf("%s names run %s by its id: %q", what, name, text)
			}
		}
		if strings.Contains(text, "main/") {
			t.Errorf("%s names a queue by its id: %q", what, text)
		}
	}
	noIDs("why pending", victim.WhyPending)
	noIDs("run reason", victim.Reason)
	var evs []api.Event
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/events", nil, &evs)
	reclaimed := false
	for _, e := range evs {
		noIDs("event "+e.ID, e.Reason)
		if e.Kind == "runs" && e.Name != ids[e.Subject] {
			t.Errorf("run event %s is named %q, want %q", e.ID, e.Name, ids[e.Subject])
		}
		if e.Kind == "jobs" && e.Status == "terminating" && strings.HasPrefix(e.Reason, "reclaim: reclaimed by run b0 of queue qb") {
			reclaimed = true
			if e.Name != victim.Name+"-0-0" {
				t.Errorf("reclaimed job event is named %q, want %s-0-0", e.Name, victim.Name)
			}
		}
	}
	if !reclaimed {
		t.Errorf("no event says a job was reclaimed by run b0: %+v", evs)
	}
}

// TestParentQueueShowsItsChildrensTotals: a grouping queue's listing sums
// its children's quotas, limits (when each has one) and jobs.
func TestParentQueueShowsItsChildrensTotals(t *testing.T) {
	ts := startServer(t, "2xH100:80GB")
	defer stopAllAndWait(t, ts)
	for _, cfg := range []string{
		"type: queue\nname: org\n",
		"type: queue\nname: t1\nparent: org\nquota:\n  gpu: 1\n  cpu: 2\nlimit:\n  gpu: 2\n",
		"type: queue\nname: t2\nparent: org\nquota:\n  gpu: 1\n  cpu: 1\nlimit:\n  gpu: 1\n",
	} {
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/queues/apply", api.ApplyRequest{ConfigurationYAML: cfg}, nil)
	}
	for i, q := range []string{"t1", "t2", "t2"} {
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask(fmt.Sprintf("r%d", i), q, 1)), nil)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		var qs []api.Queue
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/queues", nil, &qs)
		got := map[string]api.Queue{}
		for _, q := range qs {
			got[q.Name] = q
		}
		org, t1, t2 := got["org"], got["t1"], got["t2"]
		if t1.Running+t2.Running != 2 || t2.Pending != 1 {
			return fmt.Errorf("children not settled: t1 %+v, t2 %+v", t1, t2)
		}
		if org.Quota.GPU != 2 || org.Quota.CPU != 3 || org.Limit.GPU != 3 || org.Limit.CPU != -1 {
			return fmt.Errorf("org quota %+v limit %+v, want quota gpu 2 cpu 3, limit gpu 3 (cpu none)", org.Quota, org.Limit)
		}
		if org.Running != 2 || org.Pending != 1 || org.Allocated.GPU != 2 {
			return fmt.Errorf("org holds %d running, %d pending, %g GPUs allocated; want 2, 1, 2", org.Running, org.Pending, org.Allocated.GPU)
		}
		return nil
	})
}

// TestRequestsAreShownAsWritten: a GPU memory range waits saying the
// range (not its lower end), the job's resources carry it, and a job
// starting on a host of the process runtime is never shown pulling.
func TestRequestsAreShownAsWritten(t *testing.T) {
	ts := startServer(t, "2xH100:80GB")
	cfg := "type: task\nname: ranged\ncommands: [sleep 300]\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n  gpu: 16GB..24GB\n"
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(cfg), nil)
	var r api.Run
	testutil.Eventually(t, 30*time.Second, func() error {
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/ranged", nil, &r)
		if r.Status != "pending" || r.WhyPending == "" {
			return fmt.Errorf("ranged is %s (%q), want pending with a reason", r.Status, r.WhyPending)
		}
		return nil
	})
	if !strings.Contains(r.WhyPending, "16GB..24GB GPUs") {
		t.Errorf("ranged waits with %q, want it to name 16GB..24GB GPUs", r.WhyPending)
	}
	if res := r.Jobs[0].Resources; res.GPUMemory != 16*api.GB || res.GPUMemoryMax != 24*api.GB {
		t.Errorf("job resources %+v, want GPU memory 16GB..24GB", res)
	}
	insts := ts.store.Instances().List()
	if len(insts) == 0 {
		t.Fatal("no local instance")
	}
	j := r.Jobs[0]
	rec, err := ts.store.Jobs().Get(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.Status, rec.Instance = store.JobPulling, insts[0].ID
	if got := ts.jobStatusOut(rec); got != store.JobProvisioning {
		t.Errorf("a job starting on a process-runtime host shows %q, want provisioning", got)
	}
}

// TestReadableReasonNamesWhatTheProjectMayRead: scheduler names become
// the project's names; another project's runs and queues are not named,
// a deleted run's id is not shown, other words stay as they are.
func TestReadableReasonNamesWhatTheProjectMayRead(t *testing.T) {
	ts := startServer(t, "")
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	var mine, theirs api.Run
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask("mine", "default", 8)), &mine) // waits: no host has GPUs
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/other/runs/apply", yamlApply(sleepTask("theirs", "default", 8)), &theirs)
	for in, want := range map[string]string{
		"reclaimed by job " + mine.ID + " of queue main/qa: queue main/qb holds more":    "reclaimed by run mine of queue qa: queue qb holds more",
		"preempted by job " + theirs.ID + " of priority 50 in queue other/q":             "preempted by a run of another project of priority 50 in a queue of another project",
		"moved to make room for job 0123456789abcdef":                                    "moved to make room for a run since deleted",
		"placed on local-vm by allocate; starts once (job " + mine.ID + "-0-0 stopping)": "placed on local-vm by allocate; starts once (job mine-0-0 stopping)",
		"the job is not preemptible and queue is full":                                   "the job is not preemptible and queue is full",
	} {
		if got := ts.readableReason("main", in); got != want {
			t.Errorf("readableReason(%q)\n got %q\nwant %q", in, got, want)
		}
	}
}

// stopAllAndWait aborts the project's active runs and waits until each
// has ended, so no job a run got while others stopped outlives the test.
func stopAllAndWait(t *testing.T, ts *testServer) {
	t.Helper()
	testutil.Eventually(t, 60*time.Second, func() error {
		var list []api.Run
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs", nil, &list)
		for _, r := range list {
			ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/"+r.Name+"/stop", api.StopRunRequest{Abort: true}, nil)
		}
		if len(list) > 0 {
			return fmt.Errorf("%d runs still active", len(list))
		}
		return nil
	})
}
