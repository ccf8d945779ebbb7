package daemon

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/plugins/sshfleet"
)

// TestRegisteredHostThatStopsAnsweringLosesItsJobUntilItComesBack: a real
// `gpud agent --server` runs a job; the agent process is frozen (SIGSTOP),
// so its tunnel goes silent: after three missed keepalives the job fails
// with instance_unreachable and the run, retrying on error, waits for
// another host. Thawed, the agent registers again and the server stops the
// job it still ran (the server had moved it), so it does not run twice.
//
// It waits on what the server records, never on how long a step takes:
// every bound is a generous safety net (hostWait), and the keepalive is a
// second apart, answered within three, so a loaded machine's scheduling
// delays do not look like a lost host. Should one still (a tunnel dropped
// before the freeze), the run's retry starts another attempt, and every
// check below holds for whichever attempt the host runs.
func TestRegisteredHostThatStopsAnsweringLosesItsJobUntilItComesBack(t *testing.T) {
	const hostWait = 3 * time.Minute
	bin := staticGpud(t)
	ts := startServerWith(t, Options{Runtime: "process", RegistrationListen: "127.0.0.1:0",
		SSHHealth: sshfleet.HealthConfig{KeepaliveInterval: time.Second}})
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply",
		api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: metal\nnodes: 0..4\n"}, nil)
	var tok api.RegistrationToken
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/fleets/metal/tokens", nil, &tok)
	var out testutil.SyncBuffer
	agent := exec.Command(bin, "agent", "--server", ts.RegistrationURL(), "--token", tok.Token,
		"--server-ca", filepath.Join(ts.opts.DataDir, RegistrationCAFile),
		"--data-dir", t.TempDir(), "--runtime", "process", "--fake-gpus", "1xA100:40GB")
	agent.Stdout, agent.Stderr = &out, &out
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agent.Process.Signal(syscall.SIGCONT)
		// Stop the run through its agent first, so no shim writes into
		// the data dir while it is removed.
		ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/metal-job/stop", api.StopRunRequest{Abort: true}, nil)
		waitNoProcesses(time.Minute, "sleep", "3002")
		_ = agent.Process.Kill()
		_ = agent.Wait()
		// The job's processes outlive the agent (by design); end them.
		for _, pid := range processes("sleep", "3002") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	getRun := func() api.Run {
		var run api.Run
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/metal-job", nil, &run)
		return run
	}

	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply",
		yamlApply("type: task\nname: metal-job\ncommands: [sleep 3002]\nresources:\n  gpu: 1\nretry:\n  on_events: [error]\n  duration: 1h\n"), nil)
	var first api.Job
	testutil.Eventually(t, hostWait, func() error {
		run := getRun()
		if len(run.Jobs) != 1 || run.Jobs[0].Status != "running" || countProcesses("sleep", "3002") == 0 {
			return testutil.Errorf("run %s, jobs %+v, %d processes of the job; want it running; agent output:\n%s",
				run.Status, run.Jobs, countProcesses("sleep", "3002"), out.String())
		}
		first = run.Jobs[0]
		return nil
	})

	if err := agent.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, hostWait, func() error {
		j, err := ts.Store().Jobs().Get(first.ID)
		if err != nil || j.Status != "failed" || !strings.HasPrefix(j.Reason, ReasonInstanceUnreachable) {
			return testutil.Errorf("job %s (%s), want failed with %s", j.Status, j.Reason, ReasonInstanceUnreachable)
		}
		return nil
	})
	testutil.Eventually(t, hostWait, func() error {
		run := getRun()
		if len(run.Jobs) != 1 || run.Jobs[0].ID == first.ID || run.Jobs[0].Status != "submitted" {
			return testutil.Errorf("run %s (%s), jobs %+v; want a new attempt waiting for a host", run.Status, run.Reason, run.Jobs)
		}
		return nil
	})
	if countProcesses("sleep", "3002") == 0 {
		t.Fatal("the frozen agent's job should still run until the host is back")
	}

	if err := agent.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, hostWait, func() error {
		run := getRun()
		if len(run.Jobs) != 1 || run.Jobs[0].ID == first.ID || run.Jobs[0].Status != "running" {
			return testutil.Errorf("run %s, jobs %+v; want the new attempt running on the host that came back; agent output:\n%s",
				run.Status, run.Jobs, out.String())
		}
		return nil
	})
	// Only the new attempt's process runs: the stale one was stopped.
	testutil.Eventually(t, hostWait, func() error {
		if n := countProcesses("sleep", "3002"); n != 1 {
			return testutil.Errorf("%d processes of the job, want 1 (the new attempt)", n)
		}
		return nil
	})
}

// waitNoProcesses waits, at most within, until no process runs args
// (cleanup: it never fails the test).
func waitNoProcesses(within time.Duration, args ...string) {
	for deadline := time.Now().Add(within); countProcesses(args...) > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
}

// processes lists the processes on this machine running exactly args.
func processes(args ...string) []int {
	want := []byte(strings.Join(args, "\x00") + "\x00")
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && bytes.Equal(b, want) {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func countProcesses(args ...string) int { return len(processes(args...)) }
