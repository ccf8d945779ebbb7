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
// so its tunnel goes silent: within three keepalives the job fails with
// instance_unreachable and the run, retrying on error, waits for another
// host. Thawed, the agent registers again and the server stops the job it
// still ran (the server had moved it), so it does not run twice.
func TestRegisteredHostThatStopsAnsweringLosesItsJobUntilItComesBack(t *testing.T) {
	bin := staticGpud(t)
	ts := startServerWith(t, Options{Runtime: "process", RegistrationListen: "127.0.0.1:0",
		SSHHealth: sshfleet.HealthConfig{KeepaliveInterval: 300 * time.Millisecond}})
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
		deadline := time.Now().Add(10 * time.Second)
		for countProcesses("sleep", "3002") > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		_ = agent.Process.Kill()
		_ = agent.Wait()
		// The job's processes outlive the agent (by design); end them.
		for _, pid := range processes("sleep", "3002") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply",
		yamlApply("type: task\nname: metal-job\ncommands: [sleep 3002]\nresources:\n  gpu: 1\nretry:\n  on_events: [error]\n  duration: 10m\n"), nil)
	var first api.Job
	testutil.Eventually(t, 30*time.Second, func() error {
		var run api.Run
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/metal-job", nil, &run)
		if len(run.Jobs) != 1 || run.Jobs[0].Status != "running" {
			return testutil.Errorf("run %s, jobs %+v; agent output:\n%s", run.Status, run.Jobs, out.String())
		}
		first = run.Jobs[0]
		return nil
	})
	if countProcesses("sleep", "3002") == 0 {
		t.Fatal("the job's process is not running on this host")
	}

	if err := agent.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		j, err := ts.Store().Jobs().Get(first.ID)
		if err != nil || j.Status != "failed" || !strings.HasPrefix(j.Reason, ReasonInstanceUnreachable) {
			return testutil.Errorf("job %s (%s), want failed with %s", j.Status, j.Reason, ReasonInstanceUnreachable)
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, func() error {
		var run api.Run
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/metal-job", nil, &run)
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
	testutil.Eventually(t, 30*time.Second, func() error {
		var run api.Run
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/metal-job", nil, &run)
		if len(run.Jobs) != 1 || run.Jobs[0].ID == first.ID || run.Jobs[0].Status != "running" {
			return testutil.Errorf("run %s, jobs %+v; want the new attempt running on the host that came back", run.Status, run.Jobs)
		}
		return nil
	})
	// Only the new attempt's process runs: the stale one was stopped.
	testutil.Eventually(t, 20*time.Second, func() error {
		if n := countProcesses("sleep", "3002"); n != 1 {
			return testutil.Errorf("%d processes of the job, want 1 (the new attempt)", n)
		}
		return nil
	})
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
