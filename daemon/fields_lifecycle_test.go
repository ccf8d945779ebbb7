package daemon

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// These are the end-to-end proofs of the lifecycle fields (retry,
// max_duration, stop_duration) and of the per-job DSTACK_*/GPUD_*
// variables of service replicas and retried attempts: each job prints
// what it sees, and the tests read its logs and the run's events.

// scaledClock runs factor times faster than the wall clock from base, so a
// backoff of minutes passes in seconds while every timestamp and timer the
// server keeps stays consistent with it.
type scaledClock struct {
	base   time.Time
	factor time.Duration
}

func (c scaledClock) Now() time.Time { return c.base.Add(c.factor * time.Since(c.base)) }
func (c scaledClock) AfterFunc(d time.Duration, f func()) {
	time.AfterFunc((d+c.factor-1)/c.factor, f) // rounded up: never before d on this clock
}

// smallTask is a task of the given commands and extra fields that fits
// the test server's host.
func smallTask(name, commands, extra string) string {
	return fmt.Sprintf("type: task\nname: %s\ncommands: %s\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n%s", name, commands, extra)
}

// runEvents reads the run's events and its jobs' through the API.
func (ts *testServer) runEvents(name string) []api.Event {
	ts.t.Helper()
	var es []api.Event
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/"+name+"/events", nil, &es)
	return es
}

// attemptJobID is the id of node 0 of replica 0 of a run's attempt (counted
// from 1): retries create new jobs, named after their attempt.
func attemptJobID(runID string, attempt int) string {
	if attempt == 1 {
		return runID + "-0-0"
	}
	return fmt.Sprintf("%s-0-0-a%d", runID, attempt-1)
}

// eventTime is the time of the first event of subject with status, or
// the zero time.
func eventTime(es []api.Event, subject, status string) time.Time {
	for _, e := range es {
		if e.Subject == subject && e.Status == status {
			return e.Time
		}
	}
	return time.Time{}
}

// TestRetryBacksOffExponentiallyWithinItsDuration: a task that always
// fails, with `retry: {on_events: [error], duration: 2m}`, runs several
// attempts; from the events' times, each attempt starts no sooner than the
// backoff after the previous one failed (1s, 2s, 4s … on the server's
// clock, here ten times faster than the wall), so the gaps grow (the
// test bounds them from below only: a loaded machine only lengthens them); the
// waiting run is pending with the next attempt's number, start time and
// the failure; no attempt starts after the duration from the first
// failure, and the run then fails saying why it was not retried. Each
// job sees its attempt number in GPUD_RUN_ATTEMPT.
func TestRetryBacksOffExponentiallyWithinItsDuration(t *testing.T) {
	ts := startServerWith(t, Options{FakeGPUs: "1xH100:80GB", Runtime: "process", Clock: scaledClock{base: time.Now(), factor: 10}})
	ts.submit(smallTask("flaky", `['echo "attempt $GPUD_RUN_ATTEMPT"', 'exit 1']`, "retry:\n  on_events: [error]\n  duration: 2m\n"))
	run := ts.waitRun("flaky", "failed", "job flaky-0-0 exited with code 1; not retried: attempt ", 3*time.Minute)
	attempts := run.Attempt + 1
	if attempts < 4 {
		t.Fatalf("%d attempts within the 2m retry duration, want at least 4 (1s+2s+4s of backoff): %s", attempts, run.Reason)
	}
	es := ts.runEvents("flaky")
	firstFail := eventTime(es, attemptJobID(run.ID, 1), "failed")
	end := firstFail.Add(2 * time.Minute)
	var gaps []time.Duration
	for a := 1; a < attempts; a++ {
		failed := eventTime(es, attemptJobID(run.ID, a), "failed")
		started := eventTime(es, attemptJobID(run.ID, a+1), "provisioning")
		if failed.IsZero() || started.IsZero() {
			t.Fatalf("attempt %d failed at %v, attempt %d bound at %v: an event is missing: %+v", a, failed, a+1, started, es)
		}
		backoff := retryBackoff().Delay(a)
		gap := started.Sub(failed)
		if gap < backoff {
			t.Errorf("attempt %d started %s after attempt %d failed, before its %s backoff", a+1, gap, a, backoff)
		}
		if started.After(end) {
			t.Errorf("attempt %d started at %s, after the retry duration ended at %s", a+1, started, end)
		}
		gaps = append(gaps, gap)
		// While it waited, the run said which attempt starts when, and why.
		wait := fmt.Sprintf("retrying after an error (job flaky-0-0 exited with code 1): attempt %d starts at ", a+1)
		if !slices.ContainsFunc(es, func(e api.Event) bool {
			return e.Subject == run.ID && e.Status == "pending" && strings.HasPrefix(e.Reason, wait)
		}) {
			t.Errorf("no pending run event %q… for the wait before attempt %d", wait, a+1)
		}
	}
	// The last failure did not retry because the next backoff ends past the duration.
	lastFail := eventTime(es, attemptJobID(run.ID, attempts), "failed")
	if next := lastFail.Add(retryBackoff().Delay(attempts)); !next.After(end) {
		t.Errorf("the run stopped retrying after attempt %d failed at %s, but attempt %d would have started at %s, within the duration (until %s)",
			attempts, lastFail, attempts+1, next, end)
	}
	for a := 1; a <= attempts; a++ {
		got := lineTexts(ts.getLogs("flaky", "follow=true&attempt="+strconv.Itoa(a)))
		if want := fmt.Sprintf("attempt %d", a); !slices.Equal(got, []string{want}) {
			t.Errorf("logs of attempt %d: %q, want %q", a, got, want)
		}
	}
	t.Logf("%d attempts, gaps %v", attempts, gaps)
}

// TestRetryBackoffDoublesUpToFiveMinutes: planRetry's delays double from
// 1s and stop growing at 5m; a retry is planned only while its start is
// within the duration from the first failure; an attempt that ran for 5m
// or more before failing starts a new series at 1s.
func TestRetryBackoffDoublesUpToFiveMinutes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := runState{RetryEvents: []string{"error"}}
	now := t0
	var delays []time.Duration
	for range 11 {
		at, ended, ok := planRetry(&st, "error", now)
		if !ok {
			t.Fatalf("retry %d not planned without a duration: %s", st.Retries+1, ended)
		}
		delays = append(delays, at.Sub(now))
		st.Attempt++
		now = at.Add(time.Second) // the attempt fails a second after it starts
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(delays, want) {
		t.Fatalf("backoffs %v, want %v", delays, want)
	}
	if _, _, ok := planRetry(&runState{RetryEvents: []string{"error"}}, "interruption", t0); ok {
		t.Errorf("a retry on an event the policy does not list")
	}
	// Within an 8s duration: attempts failing a second after they start
	// are retried at +1s and +4s; the third retry, at +9s, is past it.
	st = runState{RetryEvents: []string{"error"}, RetryFor: 8 * time.Second}
	now = t0
	for i := range 3 {
		at, ended, ok := planRetry(&st, "error", now)
		if ok != (i < 2) {
			t.Fatalf("retry %d at %s planned=%v (%s), want %v", i+1, now, ok, ended, i < 2)
		}
		if !ok && !strings.Contains(ended, "attempt 4 would start at 2026-01-01T00:00:09Z (after a 4s backoff), past the retry duration 8s from the first failure at 2026-01-01T00:00:00Z") {
			t.Errorf("why not retried: %q", ended)
		}
		st.Attempt++
		now = at.Add(time.Second)
	}
	// An attempt that ran 5 minutes before failing: back to 1s, a new window.
	st = runState{RetryEvents: []string{"error"}, RetryFor: 10 * time.Second, Retries: 2, FirstFailedAt: t0, StartedAt: t0.Add(time.Minute)}
	now = t0.Add(6 * time.Minute)
	if at, ended, ok := planRetry(&st, "error", now); !ok || at.Sub(now) != time.Second || !st.FirstFailedAt.Equal(now) {
		t.Errorf("after a 5m attempt: planned=%v in %s (%s), window from %s; want 1s, from the new failure", ok, at.Sub(now), ended, st.FirstFailedAt)
	}
}

// TestLogsOfEachAttemptStayReachable: a task that fails on its first
// attempt and succeeds on its second (it reads GPUD_RUN_ATTEMPT) prints a
// different line in each; the logs API reads the latest attempt by
// default and the first with ?attempt=1, also for a job named by its name
// (the same in every attempt); an attempt the run never had is refused.
func TestLogsOfEachAttemptStayReachable(t *testing.T) {
	ts := startServer(t, "1xH100:80GB")
	ts.submit(smallTask("second-time-lucky", `['echo "attempt $GPUD_RUN_ATTEMPT"', 'test "$GPUD_RUN_ATTEMPT" -ge 2']`, "retry:\n  on_events: [error]\n  duration: 1h\n"))
	run := ts.waitRun("second-time-lucky", "done", "", 2*time.Minute)
	if run.Attempt != 1 {
		t.Fatalf("attempt %d, want the second (1 retry)", run.Attempt)
	}
	for _, c := range []struct{ query, want string }{
		{"follow=true", "attempt 2"},
		{"follow=true&attempt=2", "attempt 2"},
		{"follow=true&attempt=1", "attempt 1"},
		{"follow=true&attempt=1&job=second-time-lucky-0-0", "attempt 1"},
		{"follow=true&job=second-time-lucky-0-0", "attempt 2"},
		{"follow=true&job=" + attemptJobID(run.ID, 1), "attempt 1"},
	} {
		if got := lineTexts(ts.getLogs("second-time-lucky", c.query)); !slices.Equal(got, []string{c.want}) {
			t.Errorf("logs?%s: %q, want %q", c.query, got, c.want)
		}
	}
	for _, bad := range []string{"3", "0", "x"} {
		code, se := ts.call(ts.admin, "GET", "/api/v1/projects/main/runs/second-time-lucky/logs?attempt="+bad, nil, nil)
		if code != http.StatusBadRequest || se.Field != "attempt" || !strings.Contains(se.Message, "attempts 1 to 2") {
			t.Errorf("logs?attempt=%s: %d %+v, want 400 on field attempt naming attempts 1 to 2", bad, code, se)
		}
	}
}

// TestServiceReplicasEachSeeOneNode: each replica of a two-replica
// service is a one-node job: it sees DSTACK_NODES_NUM=1 and
// DSTACK_NODE_RANK=0 (as on dstack), and its own GPUD_REPLICA_NUM.
func TestServiceReplicasEachSeeOneNode(t *testing.T) {
	ts := startServer(t, "2xH100:80GB")
	ts.submit("type: service\nname: twins\nport: 8000\nreplicas: 2\nauth: false\n" +
		"commands: ['env | grep -E \"^(DSTACK|GPUD)_(NODE_RANK|NODES_NUM|REPLICA_NUM|RUN_ATTEMPT)=\" | sort', 'sleep 300']\n" +
		"resources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n")
	ts.waitRun("twins", "running", "", time.Minute)
	for replica := range 2 {
		want := []string{"DSTACK_NODES_NUM=1", "DSTACK_NODE_RANK=0", "GPUD_NODES_NUM=1", "GPUD_NODE_RANK=0",
			"GPUD_REPLICA_NUM=" + strconv.Itoa(replica), "GPUD_RUN_ATTEMPT=1"}
		job := fmt.Sprintf("twins-%d-0", replica)
		testutil.Eventually(t, 30*time.Second, func() error {
			if got := lineTexts(ts.getLogs("twins", "job="+job)); !slices.Equal(got, want) {
				return fmt.Errorf("replica %d sees %q, want %q", replica, got, want)
			}
			return nil
		})
	}
}

// logTimes returns the times of the lines of the run's logs that start
// with prefix.
func logTimes(es []api.LogEntry, prefix string) []time.Time {
	var out []time.Time
	for _, e := range es {
		if strings.HasPrefix(e.Line, prefix) {
			out = append(out, e.Time)
		}
	}
	return out
}

// termTrap is a job that says when it gets SIGTERM and then keeps going
// (printing "alive" every 0.2s) until it is killed.
const termTrap = `['trap "echo got TERM" TERM; echo ready; while :; do sleep 0.2; echo alive; done']`

// TestMaxDurationStopsTheRunWithItsReason: a run with `max_duration: 2s`
// is stopped 2s after it started running: its job gets SIGTERM (it says
// so in its log) no sooner than 2s after it started, and the run ends
// terminated with reason "max_duration 2s exceeded".
func TestMaxDurationStopsTheRunWithItsReason(t *testing.T) {
	ts := startServer(t, "1xH100:80GB")
	ts.submit(smallTask("bounded", termTrap, "max_duration: 2s\nstop_duration: 1s\n"))
	run := ts.waitRun("bounded", "terminated", "max_duration 2s exceeded", time.Minute)
	logs := ts.getLogs("bounded", "follow=true")
	ready, term := logTimes(logs, "ready"), logTimes(logs, "got TERM")
	if len(ready) != 1 || len(term) != 1 {
		t.Fatalf("the job printed %d ready and %d got TERM lines, want one each: %q", len(ready), len(term), lineTexts(logs))
	}
	if d := term[0].Sub(ready[0]); d < 2*time.Second {
		t.Errorf("SIGTERM came %s after the job started, before its max_duration of 2s", d)
	}
	es := ts.runEvents("bounded")
	running, stopping := eventTime(es, run.ID, "running"), eventTime(es, run.ID, "terminating")
	if d := stopping.Sub(running); d < 2*time.Second {
		t.Errorf("the run was stopped %s after it started running, before its max_duration of 2s", d)
	}
}

// TestStopDurationIsTheGraceBetweenSIGTERMAndSIGKILL: a job that traps
// SIGTERM and keeps running is killed stop_duration (3s) after the
// SIGTERM of `gpud stop`, measured from the job's own log: it prints the
// TERM, goes on printing for about 3s, and is killed then (its job ends
// with the kill, not after the 5m default grace).
func TestStopDurationIsTheGraceBetweenSIGTERMAndSIGKILL(t *testing.T) {
	ts := startServer(t, "1xH100:80GB")
	ts.submit(smallTask("graceful", termTrap, "stop_duration: 3s\n"))
	run := ts.waitRun("graceful", "running", "", time.Minute)
	testutil.Eventually(t, 30*time.Second, func() error {
		if len(logTimes(ts.getLogs("graceful", ""), "ready")) == 0 {
			return fmt.Errorf("the job has not trapped TERM yet")
		}
		return nil
	})
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/graceful/stop", api.StopRunRequest{}, nil)
	ts.waitRun("graceful", "terminated", "", time.Minute)
	logs := ts.getLogs("graceful", "follow=true")
	term := logTimes(logs, "got TERM")
	if len(term) != 1 {
		t.Fatalf("the job printed %d got TERM lines, want 1: %q", len(term), lineTexts(logs))
	}
	alive := logTimes(logs, "alive")
	last := alive[len(alive)-1]
	if d := last.Sub(term[0]); d < 1500*time.Millisecond || d > 15*time.Second {
		t.Errorf("the job printed its last line %s after SIGTERM, want it killed about 3s (the stop_duration) after", d)
	}
	ended := eventTime(ts.runEvents("graceful"), run.Jobs[0].ID, "terminated")
	if d := ended.Sub(term[0]); d < 3*time.Second || d > 30*time.Second {
		t.Errorf("the job ended %s after SIGTERM, want after its 3s stop_duration (and well before the 5m default)", d)
	}
}

// TestStopDurationOffIsRefusedAtPlan: `stop_duration: off` (dstack's
// unbounded grace) is refused by name at plan time: nothing could stop a
// job that ignores SIGTERM.
func TestStopDurationOffIsRefusedAtPlan(t *testing.T) {
	ts := startServer(t, "1xH100:80GB")
	status, se := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(smallTask("endless", "[true]", "stop_duration: off\n")), nil)
	if status != http.StatusUnprocessableEntity || se.Code != api.CodeNotHonoured || se.Field != "configuration.stop_duration" {
		t.Fatalf("plan: %d %s field %q (%s), want 422 %s naming stop_duration", status, se.Code, se.Field, se.Message, api.CodeNotHonoured)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(smallTask("bounded", "[true]", "stop_duration: 1h\n")), nil)
}
