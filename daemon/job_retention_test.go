package daemon

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"gpud.dev/gpud/agent/runtime/docker"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/internal/testutil/dockerimage"
)

// TestLogsOfAJobTheRetentionRemovedComeFromTheStore: the local agent
// (Options.JobRetention, `gpud serve --job-retention`) removes a finished
// job's container after the retention; the run's logs still come whole
// from the server's store, and its status is unchanged.
func TestLogsOfAJobTheRetentionRemovedComeFromTheStore(t *testing.T) {
	ts := startContainerServer(t, Options{JobRetention: 2 * time.Second})
	ts.submit("type: task\nname: kept-logs\nimage: " + dockerimage.Ref + "\ncommands:\n  - echo first line\n  - echo second line >&2\n  - echo third line\n")
	run := ts.waitRunEnd("kept-logs", 2*time.Minute)
	if run.Status != "done" || len(run.Jobs) != 1 {
		t.Fatalf("run %s (%s), jobs %+v; want done with one job", run.Status, run.Reason, run.Jobs)
	}
	job := run.Jobs[0].ID
	want := []string{"first line", "second line", "third line"}
	hasAll := func(lines []string) error {
		for _, w := range want {
			if !slices.Contains(lines, w) {
				return fmt.Errorf("logs %q lack %q", lines, w)
			}
		}
		return nil
	}

	engine, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	testutil.Eventually(t, 3*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		list, err := engine.ContainerList(ctx, client.ContainerListOptions{All: true,
			Filters: make(client.Filters).Add("label", docker.LabelJob+"="+job)})
		if err != nil {
			return err
		}
		if n := len(list.Items); n > 0 {
			return fmt.Errorf("job %s's container is still there (%s)", job, list.Items[0].State)
		}
		return nil
	})
	if err := hasAll(ts.runLogs("kept-logs")); err != nil {
		t.Fatalf("after the container's removal: %v", err)
	}
	if st, err := ts.hosts.local.agent.Get(job); err != nil || st.State != api.JobDone {
		t.Fatalf("the agent's record of the removed job: %+v, %v; want done", st, err)
	}
	if r := ts.getRun("kept-logs"); r.Status != "done" || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("run after the removal: %s (%s), exit %v; want done with 0", r.Status, r.Reason, r.ExitCode)
	}
}
