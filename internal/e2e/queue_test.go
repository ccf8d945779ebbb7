package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestQueueListAndPsExplainWaitingRuns: on a host with 2 fake GPUs, a
// queue with a quota of 1 GPU gets 3 one-GPU runs. Two run (one within
// quota, one borrowing idle capacity); the third waits, and `gpud ps`
// says why in its table and its JSON, while `gpud queue list` shows the
// queue's quota, fair share and allocation.
func TestQueueListAndPsExplainWaitingRuns(t *testing.T) {
	s := startServer(t, "process", "--fake-gpus", "2xH100:80GB")
	ctx := timeout(t, 2*time.Minute)
	files := []string{writeConfig(t, s.cli.home, "qa.yml", "type: queue\nname: qa\nquota:\n  gpu: 1\n")}
	for i := range 3 {
		files = append(files, writeConfig(t, s.cli.home, fmt.Sprintf("r%d.yml", i), fmt.Sprintf(
			"type: task\nname: r%d\nqueue: qa\ncommands:\n  - sleep 300\nresources:\n  gpu: H100:1\n  cpu: 1\n  memory: 1GB\n  disk: 1GB..\n", i)))
	}
	s.cli.must(ctx, append([]string{"apply"}, files...)...)
	t.Cleanup(func() { s.cli.run(ctx, "stop", "--abort", "r0", "r1", "r2") })

	var waiting api.Run
	testutil.Eventually(t, time.Minute, func() error {
		running := 0
		waiting = api.Run{}
		for _, r := range s.runs(t) {
			switch {
			case r.Status == "running":
				running++
			case r.WhyPending != "":
				waiting = r
			}
		}
		if running != 2 || waiting.Name == "" {
			return fmt.Errorf("%d running, waiting run %+v; want 2 running and one waiting with a reason", running, waiting)
		}
		return nil
	})
	if r := s.cli.must(ctx, "ps"); !strings.Contains(r.stdout, waiting.Name) || !strings.Contains(r.stdout, waiting.WhyPending) {
		t.Fatalf("ps does not show why %s waits (%q):\n%s", waiting.Name, waiting.WhyPending, r.stdout)
	}

	r := s.cli.must(ctx, "queue", "list", "--json")
	var queues []api.Queue
	if err := json.Unmarshal([]byte(r.stdout), &queues); err != nil {
		t.Fatalf("queue list --json: %v\n%s", err, r.stdout)
	}
	var qa api.Queue
	for _, q := range queues {
		if q.Name == "qa" {
			qa = q
		}
	}
	if qa.Quota.GPU != 1 || qa.Allocated.GPU != 2 || qa.FairShare.GPU < 2 || qa.Running != 2 || qa.Pending != 1 {
		t.Fatalf("queue qa = %+v; want quota 1 GPU, 2 allocated (1 borrowed), fair share ≥ 2, 2 running, 1 pending", qa)
	}
	table := s.cli.must(ctx, "queue", "list").stdout
	for _, want := range []string{"FAIR SHARE", "ALLOCATED", "qa", "1/0/0", "2/2/2GB"} {
		if !strings.Contains(table, want) {
			t.Errorf("queue list table lacks %q:\n%s", want, table)
		}
	}
}
