package daemon

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// getRun reads a run through the API.
func (ts *testServer) getRun(name string) api.Run {
	ts.t.Helper()
	var r api.Run
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/"+name, nil, &r)
	return r
}

// waitRun waits until the run's status is want and its reason starts
// with prefix.
func (ts *testServer) waitRun(name, want, prefix string, within time.Duration) api.Run {
	ts.t.Helper()
	var r api.Run
	testutil.Eventually(ts.t, within, func() error {
		r = ts.getRun(name)
		if r.Status != want || !strings.HasPrefix(r.Reason, prefix) {
			return fmt.Errorf("run %s is %s (%s, attempt %d), want %s (%s...)", name, r.Status, r.Reason, r.Attempt, want, prefix)
		}
		return nil
	})
	return r
}

func (ts *testServer) submit(yaml string) {
	ts.t.Helper()
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(yaml), nil)
}

// TestQueueWithOnlyAGPUQuotaAdmitsNonPreemptibleRuns: a queue that sets
// only `quota: {gpu: 1}` deserves unlimited cpu and memory, so a
// non-preemptible run asking for 1 GPU, a core and some memory starts,
// while a second one (beyond the GPU quota) waits.
func TestQueueWithOnlyAGPUQuotaAdmitsNonPreemptibleRuns(t *testing.T) {
	ts := startServer(t, "2xH100:80GB")
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/queues/apply", api.ApplyRequest{ConfigurationYAML: "type: queue\nname: gq\nquota:\n  gpu: 1\n"}, nil)
	for _, name := range []string{"np1", "np2"} {
		ts.submit(fmt.Sprintf("type: task\nname: %s\nqueue: gq\npreemptible: false\ncommands: [sleep 300]\nresources:\n  cpu: 1..\n  memory: 64MB..\n  disk: 1GB..\n  gpu: 1\n", name))
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		a, b := ts.getRun("np1"), ts.getRun("np2")
		running, pending := 0, 0
		for _, r := range []api.Run{a, b} {
			switch {
			case r.Status == "running":
				running++
			case r.Status == "pending" && r.WhyPending != "":
				pending++
			}
		}
		if running != 1 || pending != 1 {
			return fmt.Errorf("np1 %s (%s), np2 %s (%s): want one running, one pending beyond the gpu quota", a.Status, a.WhyPending, b.Status, b.WhyPending)
		}
		return nil
	})
}

// TestRetryOnNoCapacity: a run no host can hold waits pending without a
// retry policy, and fails with reason no_capacity once the duration of
// `retry: {on_events: [no-capacity]}` has passed.
func TestRetryOnNoCapacity(t *testing.T) {
	ts := startServer(t, "2xH100:80GB")
	big := "type: task\nname: %s\ncommands: [sleep 300]\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n  gpu: 8\n%s"
	cases := []struct {
		name, retry, status, reason string
	}{
		{"without-retry-waits-pending", "", "pending", ""},
		{"retry-no-capacity-fails-after-duration", "retry:\n  on_events: [no-capacity]\n  duration: 2s\n", "failed", "no_capacity:"},
		{"retry-on-errors-only-waits-pending", "retry:\n  on_events: [error]\n  duration: 2s\n", "pending", ""},
	}
	for _, c := range cases {
		ts.submit(fmt.Sprintf(big, c.name, c.retry))
	}
	// Once the run retrying on no-capacity has failed, its 2s duration
	// is past for the others too (submitted with it): each is where
	// its policy puts it. An event, not a sleep, says when to look.
	ts.waitRun(cases[1].name, cases[1].status, cases[1].reason, 2*time.Minute)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ts.waitRun(c.name, c.status, c.reason, 2*time.Minute)
			if c.status == "pending" && r.WhyPending == "" {
				t.Fatalf("a waiting run should say why: %+v", r)
			}
			if c.status == "failed" && (len(r.Jobs) != 1 || r.Jobs[0].Status != "failed") {
				t.Fatalf("the unplaced job should fail with its run: %+v", r.Jobs)
			}
		})
	}
}

// killShim SIGKILLs the process runtime's shim of a job (and then the
// job's own process), so the agent loses the job's exit: an interruption.
func killShim(t *testing.T, dataDir, jobID string) {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(dataDir, "agent", "*", jobID, "child.json"))
	matches2, _ := filepath.Glob(filepath.Join(dataDir, "agent", "*", "*", jobID, "child.json"))
	matches = append(matches, matches2...)
	if len(matches) != 1 {
		t.Fatalf("child.json of job %s: %v", jobID, matches)
	}
	data, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		ShimPID int `json:"shim_pid"`
		PID     int `json:"pid"`
	}
	if err := json.Unmarshal(data, &c); err != nil || c.ShimPID == 0 || c.PID == 0 {
		t.Fatalf("child.json %s: %v", data, err)
	}
	if err := syscall.Kill(c.ShimPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The job's process group (the shell and its command) outlives the shim.
	if syscall.Kill(-c.PID, syscall.SIGKILL) != nil {
		_ = syscall.Kill(c.PID, syscall.SIGKILL)
	}
}

// TestRetryOnInterruption: when the host loses a running job (its shim is
// killed, the exit is unknown), a run with `retry: {on_events:
// [interruption]}` runs again as a new attempt; one without, or with retry
// on errors only, fails with reason interrupted.
func TestRetryOnInterruption(t *testing.T) {
	dir := t.TempDir()
	ts := startServerWith(t, Options{FakeGPUs: "4xH100:80GB", Runtime: "process", DataDir: dir})
	task := "type: task\nname: %s\ncommands: [sleep 300]\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n  gpu: 1\n%s"
	cases := []struct {
		name, retry, status, reason string
		attempt                     int
	}{
		{"retry-interruption-runs-again", "retry:\n  on_events: [interruption]\n  duration: 1h\n", "running", "", 1},
		{"without-retry-fails-interrupted", "", "failed", "interrupted: ", 0},
		{"retry-on-errors-only-fails-interrupted", "retry:\n  on_events: [error]\n", "failed", "interrupted: ", 0},
	}
	for _, c := range cases {
		ts.submit(fmt.Sprintf(task, c.name, c.retry))
	}
	for _, c := range cases {
		r := ts.waitRun(c.name, "running", "", 30*time.Second)
		killShim(t, dir, r.Jobs[0].ID)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			testutil.Eventually(t, 30*time.Second, func() error {
				r := ts.getRun(c.name)
				if r.Attempt != c.attempt || r.Status != c.status || !strings.HasPrefix(r.Reason, c.reason) {
					return fmt.Errorf("attempt %d %s (%s), want attempt %d %s (%s...)", r.Attempt, r.Status, r.Reason, c.attempt, c.status, c.reason)
				}
				return nil
			})
		})
	}
}

// TestUtilizationPolicyStopsARunWithIdleGPUs: fake GPUs report 0%
// utilization, so a run with `utilization_policy: {min_gpu_utilization:
// 10, time_window: 2s}` is terminated with reason low_gpu_utilization.
func TestUtilizationPolicyStopsARunWithIdleGPUs(t *testing.T) {
	ts := startServer(t, "2xH100:80GB")
	ts.submit("type: task\nname: idle-gpu\ncommands: [sleep 300]\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n  gpu: 1\nutilization_policy:\n  min_gpu_utilization: 10\n  time_window: 2s\n")
	ts.waitRun("idle-gpu", "running", "", 30*time.Second)
	r := ts.waitRun("idle-gpu", "terminated", "low_gpu_utilization:", 30*time.Second)
	if r.FinishedAt.Sub(r.StartedAt) < 2*time.Second {
		t.Fatalf("stopped after %s, before its 2s window", r.FinishedAt.Sub(r.StartedAt))
	}
}

// TestDevEnvironmentStopsAfterInactivity: a dev environment with
// inactivity_duration 5s keeps running while a client holds a connection
// to its published port (for twice that), and stops once nobody was
// attached for 5s. The watcher counts idle time from its first sample, so
// the client must attach within 5s of the run's start: 2s was a race that
// a loaded machine lost (the dial came later and the run had stopped).
func TestDevEnvironmentStopsAfterInactivity(t *testing.T) {
	const idle = 5 * time.Second
	ts := startServer(t, "1xH100:80GB")
	port := testutil.FreePort(t)
	ts.submit(fmt.Sprintf("type: dev-environment\nname: dev\nports: [%d]\ninit: ['(busybox nc -ll -p %d -e /bin/cat &)']\ninactivity_duration: %s\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n", port, port, idle))
	ts.waitRun("dev", "running", "", 2*time.Minute)
	var conn net.Conn
	testutil.Eventually(t, 2*time.Minute, func() error {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		conn = c
		return err
	})
	// Attached for twice the inactivity: it must keep running (a lower
	// bound on time, which load only lengthens).
	time.Sleep(2 * idle)
	if r := ts.getRun("dev"); r.Status != "running" {
		t.Fatalf("an attached dev environment stopped: %s (%s)", r.Status, r.Reason)
	}
	conn.Close()
	detached := time.Now()
	ts.waitRun("dev", "terminated", "inactivity_duration 5s:", 2*time.Minute)
	if time.Since(detached) < idle {
		t.Fatalf("stopped %s after the client left, before its %s inactivity", time.Since(detached), idle)
	}
}

// fastClock runs 60 times faster than the wall clock, so a cron tick every
// minute comes every second.
type fastClock struct{ base time.Time }

func (c fastClock) Now() time.Time { return c.base.Add(60 * time.Since(c.base)) }
func (c fastClock) AfterFunc(d time.Duration, f func()) {
	time.AfterFunc(d/60, f)
}

// TestCronScheduleResubmitsAtEachTick: a run with `schedule: {cron: "* *
// * * *"}` waits for its tick, runs, and is resubmitted for the next tick
// as a new attempt each time it ends, until stopped.
func TestCronScheduleResubmitsAtEachTick(t *testing.T) {
	ts := startServerWith(t, Options{FakeGPUs: "1xH100:80GB", Runtime: "process", Clock: fastClock{base: time.Now()}})
	ts.submit("type: task\nname: nightly\ncommands: [echo tick]\nschedule:\n  cron: '* * * * *'\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n")
	if r := ts.getRun("nightly"); r.Status == "running" || r.Status == "done" {
		t.Fatalf("a scheduled run started before its tick: %s", r.Status)
	}
	var r api.Run
	testutil.Eventually(t, 30*time.Second, func() error {
		r = ts.getRun("nightly")
		done := 0
		for _, j := range ts.Store().Jobs().ByRun(r.ID) {
			if j.Status == store.JobDone {
				done++
			}
		}
		if done < 2 || r.Attempt < 2 {
			return fmt.Errorf("%d attempts done, attempt %d (%s: %s)", done, r.Attempt, r.Status, r.Reason)
		}
		return nil
	})
	if finishedRun(r.Status) {
		t.Fatalf("a scheduled run should wait for its next tick, not end: %s (%s)", r.Status, r.Reason)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/nightly/stop", api.StopRunRequest{}, nil)
	ts.waitRun("nightly", "terminated", "", 20*time.Second)
}
