package daemon

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// corruptSpec overwrites a stored record's Spec with JSON of the wrong
// shape, as a damaged or hand-edited state file would hold it.
func (ts *testServer) corruptSpec(kind store.Kind, id string) store.Record {
	ts.t.Helper()
	rec, err := ts.store.Collection(kind).Get(id)
	if err != nil {
		ts.t.Fatal(err)
	}
	rec.Spec = []byte(`{"config": 5, "request": "all of them", "attempt": "first"}`)
	if _, err := ts.store.Apply(context.Background(), store.Put(rec)); err != nil {
		ts.t.Fatal(err)
	}
	got, err := ts.store.Collection(kind).Get(id)
	if err != nil {
		ts.t.Fatal(err)
	}
	return got
}

// cycleNow runs one scheduling cycle to its end; a version conflict with
// the server's own loop (which may plan at the same moment) is retried.
func (ts *testServer) cycleNow() {
	ts.t.Helper()
	testutil.Eventually(ts.t, 10*time.Second, func() error {
		return ts.scheduler.cycle(context.Background())
	})
}

// TestACorruptJobRecordIsReportedNotReadAsEmpty: a job whose stored spec
// no longer decodes was read as a zero spec (its decode error dropped): the
// API showed it with no resources and the scheduler saw a job asking for
// nothing, which fits anywhere, and placed it. Now the run's API view
// fails with 500 internal naming the job record, the run listing leaves it
// out, a stop is refused rather than rewriting the job from nothing, and a
// scheduling cycle leaves the job unplaced.
func TestACorruptJobRecordIsReportedNotReadAsEmpty(t *testing.T) {
	ts := startServer(t, "1xH100:80GB")
	// Two GPUs on a one-GPU host: pending for good, so nothing runs.
	ts.submit(sleepTask("big", "default", 2))
	ts.submit(sleepTask("fine", "default", 0))
	ts.waitRun("big", store.RunPending, "", 30*time.Second)
	jobs := ts.store.Jobs().ByRun(ts.getRun("big").ID)
	if len(jobs) != 1 {
		t.Fatalf("big has %d jobs, want 1", len(jobs))
	}
	bad := ts.corruptSpec(store.KindJob, jobs[0].ID)

	code, se := ts.call(ts.admin, "GET", "/api/v1/projects/main/runs/big", nil, nil)
	if code != http.StatusInternalServerError || se.Code != api.CodeInternal || !strings.Contains(se.Message, "job "+bad.ID) {
		t.Fatalf("GET a run with a corrupt job: %d %s %q; want 500 internal naming job %s", code, se.Code, se.Message, bad.ID)
	}

	var list []api.Run
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs", nil, &list)
	names := map[string]bool{}
	for _, r := range list {
		names[r.Name] = true
	}
	if names["big"] || !names["fine"] {
		t.Fatalf("run listing %v: want the healthy run and not the corrupt one", names)
	}

	code, se = ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/big/stop", api.StopRunRequest{}, nil)
	if code != http.StatusInternalServerError || !strings.Contains(se.Message, "job "+bad.ID) {
		t.Fatalf("stop a run with a corrupt job: %d %q; want 500 naming job %s", code, se.Message, bad.ID)
	}

	ts.cycleNow()
	j, err := ts.store.Jobs().Get(bad.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Instance != "" || j.Status != store.JobSubmitted || string(j.Spec) != string(bad.Spec) {
		t.Fatalf("the corrupt job was acted on: status %s, instance %q, spec %s", j.Status, j.Instance, j.Spec)
	}
	// The healthy run is scheduled as before.
	ts.waitRun("fine", store.RunRunning, "", 30*time.Second)
}

// TestACorruptQueueHoldsItsRunsInsteadOfActingAsTheDefault: a queue whose
// stored configuration no longer decodes was read as the built-in default
// (no quota, no limit, weight 1), so its runs were placed under rules
// nobody set. Now its runs wait, the queue listing leaves it out and its
// deletion check refuses rather than guess.
func TestACorruptQueueHoldsItsRunsInsteadOfActingAsTheDefault(t *testing.T) {
	ts := startServer(t, "1xH100:80GB")
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/queues/apply", api.ApplyRequest{ConfigurationYAML: "type: queue\nname: capped\nlimit:\n  gpu: 0\n"}, nil)
	ts.corruptSpec(store.KindQueue, queueID("main", "capped"))
	ts.submit(sleepTask("held", "capped", 1))
	ts.cycleNow()
	for _, j := range ts.store.Jobs().ByRun(ts.getRun("held").ID) {
		if j.Instance != "" || j.Status != store.JobSubmitted {
			t.Fatalf("a run of a corrupt queue was placed: %s on %q", j.Status, j.Instance)
		}
	}
	var queues []api.Queue
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/queues", nil, &queues)
	for _, q := range queues {
		if q.Name == "capped" {
			t.Fatalf("the queue listing shows the corrupt queue as %+v", q)
		}
	}
}

// offsetClock is the wall clock moved years ahead, so a timestamp taken
// from the wall clock instead of the server's Clock stands out.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time                      { return time.Now().Add(c.d) }
func (c offsetClock) AfterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }

// TestEveryTimestampTheServerRecordsComesFromItsClock: the server took
// most of its timestamps (events, submission, binding, a job's end, usage
// samples) from time.Now, bypassing Options.Clock. With a clock five years
// ahead, every recorded time of a run that ran to its end is that clock's.
func TestEveryTimestampTheServerRecordsComesFromItsClock(t *testing.T) {
	const ahead = 5 * 365 * 24 * time.Hour
	ts := startServerWith(t, Options{FakeGPUs: "1xH100:80GB", Runtime: "process", Clock: offsetClock{ahead}})
	ts.submit("type: task\nname: once\ncommands: [echo hi]\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n")
	r := ts.waitRun("once", store.RunDone, "", 30*time.Second)
	floor := time.Now().Add(ahead - time.Hour)
	check := func(what string, at time.Time) {
		t.Helper()
		if at.Before(floor) {
			t.Errorf("%s %s is the wall clock's, not the server's (after %s)", what, at.Format(time.RFC3339), floor.Format(time.RFC3339))
		}
	}
	check("run submitted_at", r.SubmittedAt)
	check("run started_at", r.StartedAt)
	check("run finished_at", r.FinishedAt)
	// A job's started_at and finished_at are its agent's report (another
	// host's clock); its submission is the server's.
	for _, j := range r.Jobs {
		check("job "+j.Name+" submitted_at", j.SubmittedAt)
	}
	var events []api.Event
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/once/events", nil, &events)
	if len(events) == 0 {
		t.Fatal("no events for the run")
	}
	for _, e := range events {
		check("event "+e.Kind+" "+e.Status, e.Time)
	}
	var fleets []api.Fleet
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/fleets", nil, &fleets)
	for _, f := range fleets {
		for _, i := range f.Instances {
			check("instance "+i.Name+" last heartbeat", i.LastHeartbeat)
		}
	}
}
