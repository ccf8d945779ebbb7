package daemon

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// A job the store had finished while its agent still ran it was skipped
// at adoption and ran for ever, holding GPUs the scheduler believed free.
// Here the job is recorded failed while the server is down (as an operator
// or a crash between the store and the agent could leave it); the next
// start must stop it on the agent and say so in an event.
func TestAdoptionStopsAJobTheStoreHasFinished(t *testing.T) {
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	first := startServerProcess(t, dir, listen)
	ts := &testServer{t: t, admin: first.token, Server: &Server{url: "http://" + listen}}
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask("orphan", "default", 0)), nil)
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := len(shimDirs(t, dir)); n != 1 {
			time.Sleep(100 * time.Millisecond)
			return fmt.Errorf("%d jobs running, want 1", n)
		}
		return nil
	})
	// A graceful stop leaves jobs running, to be re-adopted.
	_ = first.cmd.Process.Signal(syscall.SIGTERM)
	if err := first.cmd.Wait(); err != nil {
		t.Fatalf("first server: %v", err)
	}
	if n := len(shimDirs(t, dir)); n != 1 {
		t.Fatalf("%d jobs run after the server stopped, want 1", n)
	}

	st, err := store.Open(filepath.Join(dir, "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var jobID string
	for _, j := range st.Jobs().List() {
		jobID = j.ID
		j.Status, j.Reason = store.JobFailed, "recorded failed while the server was down"
		if _, err := st.Apply(context.Background(), store.Update(j)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if jobID == "" {
		t.Fatal("the store holds no job")
	}

	second := startServerProcess(t, dir, listen)
	t.Cleanup(func() {
		_ = second.cmd.Process.Signal(syscall.SIGTERM)
		_ = second.cmd.Wait()
	})
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := len(shimDirs(t, dir)); n != 0 {
			time.Sleep(100 * time.Millisecond)
			return fmt.Errorf("%d jobs still run after the restart, want 0", n)
		}
		return nil
	})
	var events []api.Event
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/events?limit=1000", nil, &events)
	for _, e := range events {
		if e.Status == "stale_job_stopped" && strings.Contains(e.Reason, "stopped job orphan-0-0:") { // job jobID, by its name
			return
		}
	}
	t.Errorf("no stale_job_stopped event names job %s; events: %+v", jobID, events)
}

// A heartbeating agent that still runs a job the store has finished is
// told the job is unknown, so it stops it; a job still expected there is
// not.
func TestHeartbeatTellsTheAgentToStopAJobTheStoreHasFinished(t *testing.T) {
	ts := startServer(t, "1xH100:80GB")
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/agents/heartbeat", api.Heartbeat{Instance: "sim-1"}, nil)
	ctx := context.Background()
	for id, status := range map[string]string{"done-0-0": store.JobFailed, "live-0-0": store.JobRunning} {
		if _, err := ts.store.Apply(ctx, store.Put(store.Record{Kind: store.KindJob, ID: id, Name: id, Project: "main", Instance: "sim-1", Status: status})); err != nil {
			t.Fatal(err)
		}
	}
	var resp api.HeartbeatResponse
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/agents/heartbeat", api.Heartbeat{Instance: "sim-1", Jobs: []api.JobStatus{
		{ID: "done-0-0", State: api.JobRunning}, {ID: "live-0-0", State: api.JobRunning},
	}}, &resp)
	if len(resp.Unknown) != 1 || resp.Unknown[0] != "done-0-0" {
		t.Fatalf("unknown jobs %v, want [done-0-0]", resp.Unknown)
	}
}
