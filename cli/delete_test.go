package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestDeleteCommand drives gpud delete on the real binary against a real
// server running process jobs: a running run is refused by name with
// gpud stop, and nothing else named with it goes; an unknown run is
// refused; without a terminal --yes is required; a finished run goes with
// its logs (gpud logs then says it is gone); bash completion offers the
// finished runs; --all-finished --json takes the rest once stopped.
func TestDeleteCommand(t *testing.T) {
	srv := serveProcessJobsForCLI(t)
	cl, err := api.NewClient(srv.URL(), srv.AdminToken(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	submit := func(name, cmd string) {
		t.Helper()
		yaml := "type: task\nname: " + name + "\ncommands: [" + cmd + "]\nresources: {cpu: 0.., memory: 1MB.., disk: 1GB..}\n"
		if _, err := cl.ApplyRun(ctx, "main", api.ApplyRunRequest{ApplyRequest: api.ApplyRequest{ConfigurationYAML: yaml, Filename: name + ".yml"}}); err != nil {
			t.Fatalf("submit %s: %v", name, err)
		}
	}
	waitFor := func(name string, ok func(api.Run) bool) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, func() error {
			r, err := cl.GetRun(ctx, "main", name)
			if err != nil || !ok(r) {
				return testutil.Errorf("run %s: %+v %v", name, r.Status, err)
			}
			return nil
		})
	}
	finished := func(r api.Run) bool { return r.Finished() }
	submit("hello", "echo hello from a run to delete")
	submit("eval1", "true")
	submit("busy", "sleep 300")
	waitFor("hello", finished)
	waitFor("eval1", finished)
	waitFor("busy", func(r api.Run) bool { return r.Status == "running" })
	// Once more under its name: both records of hello go together.
	submit("hello", "echo hello again")
	waitFor("hello", finished)

	gpud(t, nil, "delete", "busy").want(t, "delete of a running run", 1, "run busy is running, not finished: stop it first (gpud stop busy)")
	gpud(t, nil, "delete", "--yes", "eval1", "busy", "nosuch").want(t, "delete of a finished, a running and an unknown run", 1,
		"nothing deleted", "gpud stop busy", "no run nosuch in project main")
	if _, err := cl.GetRun(ctx, "main", "eval1"); err != nil {
		t.Fatalf("eval1 was deleted along with a refused delete: %v", err)
	}
	gpud(t, nil, "delete", "hello").want(t, "delete without a terminal", 2, "pass --yes")
	gpud(t, nil, "delete", "--all-finished", "hello").want(t, "names and --all-finished", 2, "not both")
	gpud(t, nil, "delete", "hello", "--yes").want(t, "flag after the runs", 2, "put flags before the runs, like gpud delete --yes hello")

	r := gpud(t, nil, "delete", "--generate-bash-completion")
	if got := strings.Fields(r.stdout); len(got) != 2 || !strings.Contains(r.stdout, "hello") || !strings.Contains(r.stdout, "eval1") {
		t.Errorf("completion of gpud delete: %q, want the finished runs hello and eval1", r.stdout)
	}

	gpud(t, nil, "delete", "--yes", "hello").want(t, "delete hello", 0, "run hello deleted (done)")
	runs, err := cl.ListRuns(ctx, "main", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if r.Name == "hello" {
			t.Errorf("a record of hello outlived gpud delete hello: %+v", r)
		}
	}
	gpud(t, nil, "logs", "hello").want(t, "logs of a deleted run", 1, `run "hello" not found`)

	gpud(t, nil, "stop", "--abort", "busy").want(t, "stop busy", 0)
	waitFor("busy", finished)
	r = gpud(t, nil, "delete", "--all-finished", "--yes", "--json")
	r.want(t, "delete --all-finished", 0)
	var deleted []api.Run
	if err := json.Unmarshal([]byte(r.stdout), &deleted); err != nil || len(deleted) != 2 {
		t.Fatalf("delete --all-finished --json: %q %v; want eval1 and busy", r.stdout, err)
	}
	gpud(t, nil, "delete", "--all-finished", "--yes").want(t, "delete --all-finished of nothing", 0, "no finished runs in project main")
	if runs, err := cl.ListRuns(ctx, "main", true); err != nil || len(runs) != 0 {
		t.Errorf("runs left: %+v %v", runs, err)
	}
}
