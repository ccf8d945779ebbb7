package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/daemon"
	"gpud.dev/gpud/internal/testutil"
)

// TestPsNamesWhoReclaimedAWaitingRun: on a 2-GPU host, queues qa and qb
// (quota 1 GPU each, under a parent org); qa's two runs borrow qb's GPU
// until qb's run comes and reclaims it. gpud ps then shows the reclaimed
// run waiting with the reclaiming run and queue named, gpud events names
// runs and jobs instead of ids, and gpud queue list shows org with its
// children's totals.
func TestPsNamesWhoReclaimedAWaitingRun(t *testing.T) {
	t.Setenv(envShimHelper, "1")
	serveForCLI(t, daemon.Options{FakeGPUs: "2xH100:80GB", Runtime: "process",
		ShimCommand: []string{os.Args[0], "-test.run=^TestProcessShimHelper$"}})
	dir := t.TempDir()
	var queues []string
	for _, q := range []string{"name: org\n", "name: qa\nparent: org\nquota:\n  gpu: 1\n", "name: qb\nparent: org\nquota:\n  gpu: 1\n"} {
		f := filepath.Join(dir, fmt.Sprintf("queue%d.yml", len(queues)))
		writeTestFile(t, f, "type: queue\n"+q)
		queues = append(queues, f)
	}
	mustRunCLI(t, append([]string{"queue", "apply"}, queues...)...)
	var names []string
	t.Cleanup(func() {
		// Stop the runs and wait for them to end, else their process
		// shims outlive the server.
		if len(names) == 0 {
			return
		}
		runCLI(append([]string{"stop", "--abort"}, names...)...)
		testutil.Eventually(t, 60*time.Second, func() error {
			if out, _, _ := runCLI("ps"); !strings.HasPrefix(out, "no runs") {
				return fmt.Errorf("runs still active:\n%s", out)
			}
			return nil
		})
	})
	submit := func(name, queue string) {
		task := filepath.Join(dir, name+".yml")
		writeTestFile(t, task, fmt.Sprintf(`type: task
name: %s
queue: %s
commands: [sleep 300]
resources:
  cpu: 0..
  memory: 1MB..
  disk: 1GB..
  gpu: 1
`, name, queue))
		mustRunCLI(t, "run", "-y", "-d", task)
		names = append(names, name)
	}
	submit("a0", "qa")
	submit("a1", "qa")
	testutil.Eventually(t, 30*time.Second, func() error {
		out := mustRunCLI(t, "ps")
		if strings.Count(out, " running") < 2 {
			return fmt.Errorf("a0 and a1 not both running:\n%s", out)
		}
		return nil
	})
	submit("b0", "qb")
	var ps string
	testutil.Eventually(t, 60*time.Second, func() error {
		ps = mustRunCLI(t, "ps")
		for _, line := range strings.Split(ps, "\n") {
			if strings.HasPrefix(line, "a") && strings.Contains(line, "pending") && strings.Contains(line, "reclaimed by run b0 of queue qb") {
				return nil
			}
		}
		return fmt.Errorf("no a run waits naming the reclaim by run b0 of queue qb:\n%s", ps)
	})
	t.Logf("gpud ps:\n%s", ps)
	if !strings.Contains(ps, "1×GPU") || strings.Contains(ps, "×-") {
		t.Errorf("resources column does not show gpu: 1 as 1×GPU:\n%s", ps)
	}
	events := mustRunCLI(t, "events")
	if !strings.Contains(events, "reclaim: reclaimed by run b0 of queue qb") {
		t.Errorf("gpud events does not name the reclaiming run:\n%s", events)
	}
	if strings.Contains(events, "main/") {
		t.Errorf("gpud events names queues by id:\n%s", events)
	}
	ql := mustRunCLI(t, "queue", "list")
	var org string
	for _, line := range strings.Split(ql, "\n") {
		if strings.HasPrefix(line, "org ") {
			org = strings.Join(strings.Fields(line), " ")
		}
	}
	// NAME PARENT PRIORITY QUOTA LIMIT FAIR SHARE ALLOCATED USAGE PENDING RUNNING
	if f := strings.Fields(org); len(f) < 10 || f[3] != "2/0/0" || f[len(f)-2] != "1" || f[len(f)-1] != "2" {
		t.Errorf("org's line does not sum its children (quota 2 GPUs, 1 pending, 2 running): %q\n%s", org, ql)
	}
}
