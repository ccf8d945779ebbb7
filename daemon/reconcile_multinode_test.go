package daemon

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// multiNodeTask is a two-node task on the one local host: the master
// (rank 0) runs masterCmd, the worker workerCmd.
func multiNodeTask(name, extra, masterCmd, workerCmd string) string {
	return fmt.Sprintf("type: task\nname: %s\nnodes: 2\n%scommands:\n  - if [ \"$DSTACK_NODE_RANK\" = 0 ]; then %s; else %s; fi\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n", name, extra, masterCmd, workerCmd)
}

// TestStopCriteriaMasterDoneStopsTheWorkers: with master-done the run
// ends when the master exits — the workers are stopped and the run is
// done (or failed, by the master's exit code); with all-done the run
// waits for every node.
func TestStopCriteriaMasterDoneStopsTheWorkers(t *testing.T) {
	ts := startServer(t, "")
	cases := []struct {
		name, extra, master string
		status              string
		workerStatus        string
	}{
		{"master-done", "stop_criteria: master-done\n", "exit 0", "done", "terminated"},
		{"master-failed", "stop_criteria: master-done\n", "exit 4", "failed", "terminated"},
		{"all-done", "", "exit 0", "running", "running"},
	}
	for _, c := range cases {
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(multiNodeTask(c.name, c.extra, c.master, "sleep 300")), nil)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var run api.Run
			testutil.Eventually(t, 30*time.Second, func() error {
				ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/"+c.name, nil, &run)
				if run.Status != c.status || len(run.Jobs) != 2 || run.Jobs[1].Status != c.workerStatus || run.Jobs[0].Status == "running" {
					return fmt.Errorf("run %s (%s), jobs %+v", run.Status, run.Reason, run.Jobs)
				}
				return nil
			})
		})
	}
}

// TestStartupOrderStartsTheFirstNodesFirst: master-first starts the
// worker only once the master runs, workers-first the reverse.
func TestStartupOrderStartsTheFirstNodesFirst(t *testing.T) {
	ts := startServer(t, "")
	cases := []struct{ order, first string }{
		{"master-first", "master"},
		{"workers-first", "worker"},
	}
	for _, c := range cases {
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(multiNodeTask(c.order, "startup_order: "+c.order+"\n", "sleep 300", "sleep 300")), nil)
	}
	for _, c := range cases {
		t.Run(c.order, func(t *testing.T) {
			var run api.Run
			testutil.Eventually(t, 30*time.Second, func() error {
				ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/"+c.order, nil, &run)
				if run.Status != "running" {
					return fmt.Errorf("run %s (%s)", run.Status, run.Reason)
				}
				return nil
			})
			master, worker := run.Jobs[0].StartedAt, run.Jobs[1].StartedAt
			first, second := master, worker
			if c.first == "worker" {
				first, second = worker, master
			}
			if first.IsZero() || !first.Before(second) {
				t.Fatalf("%s: master started %s, worker %s", c.order, master.Format(time.RFC3339Nano), worker.Format(time.RFC3339Nano))
			}
		})
	}
}
