package server_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mobyclient "github.com/moby/moby/client"
	"github.com/rs/zerolog"

	"gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/agent/runtime/docker"
	"gpud.dev/gpud/agent/state"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestFinishedDockerJobsAreRemovedAfterTheRetention: 50 jobs end on a
// Docker host whose agent keeps finished jobs 3 s; afterwards no
// container of the agent is left, none went before its retention, and
// every job still answers with how it ended (its logs are the server's).
func TestFinishedDockerJobsAreRemovedAfterTheRetention(t *testing.T) {
	const jobs = 50
	const retention = 3 * time.Second
	h := newHost(t, "docker")
	h.retention = retention
	r := h.start(t)
	removeAll(t, r.cli)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	ids := make([]string, jobs)
	errs := make(chan error, jobs)
	sem := make(chan struct{}, 4) // a few starts at once, as a busy server's dispatcher
	var wg sync.WaitGroup
	for i := range jobs {
		ids[i] = fmt.Sprintf("ret-%02d", i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := r.cli.Start(ctx, spec(t, ids[i], fmt.Sprintf("echo job %d", i))); err != nil {
				errs <- fmt.Errorf("start %s: %w", ids[i], err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, id := range ids {
		st, err := r.cli.Wait(ctx, id)
		if err != nil || st.State != api.JobDone {
			t.Fatalf("job %s: %+v, %v; want done", id, st, err)
		}
	}

	engine := r.rt.(*docker.Runtime).Client()
	testutil.Eventually(t, 5*time.Minute, func() error {
		left, err := agentContainers(ctx, engine, h.agentID)
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("%d containers of the agent left, like %v", len(left), left[0])
		}
		return nil
	})
	for _, id := range ids {
		st, err := r.cli.Get(ctx, id)
		if err != nil || st.State != api.JobDone || st.ExitCode != 0 || st.FinishedAt.IsZero() {
			t.Fatalf("job %s after its removal: %+v, %v; want done with its exit", id, st, err)
		}
		n := 0
		if err := r.cli.Logs(ctx, id, client.LogOptions{}, func(api.JobLogEntry) error { n++; return nil }); err != nil || n != 0 {
			t.Fatalf("logs of removed job %s: %d entries, %v; want none and no error", id, n, err)
		}
		if _, err := os.Stat(filepath.Join(h.dataDir, "docker", id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("job %s's files: %v, want removed", id, err)
		}
	}
	// The state file says when each was removed: never before its retention.
	r.stop()
	for _, rec := range records(t, h.dataDir) {
		if rec.Removed.IsZero() || rec.Removed.Before(rec.Status.FinishedAt.Add(retention)) {
			t.Errorf("job %s finished %s, removed %s: want removed, %s after its end or later",
				rec.Spec.ID, rec.Status.FinishedAt, rec.Removed, retention)
		}
	}
}

// TestFinishedJobsOutliveAnAgentRestartUntilTheirRetention: a process job
// ends under an agent that keeps finished jobs an hour; the next agent,
// keeping them a second, removes its files (the retention counts from
// the job's end, across restarts) and keeps its record; the one after,
// keeping records a second, drops the record.
func TestFinishedJobsOutliveAnAgentRestartUntilTheirRetention(t *testing.T) {
	h := newHost(t, "process")
	r := h.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := r.cli.Start(ctx, spec(t, "kept", "echo kept")); err != nil {
		t.Fatal(err)
	}
	if st, err := r.cli.Wait(ctx, "kept"); err != nil || st.State != api.JobDone {
		t.Fatalf("wait: %+v, %v", st, err)
	}
	dir := filepath.Join(h.dataDir, "jobs", "kept")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the job's files under an hour's retention: %v", err)
	}
	r.stop()

	h.retention = time.Second
	r = h.start(t)
	testutil.Eventually(t, 2*time.Minute, func() error {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the job's files %s: %v, want removed", dir, err)
		}
		return nil
	})
	if st, err := r.cli.Get(ctx, "kept"); err != nil || st.State != api.JobDone {
		t.Fatalf("the removed job's record: %+v, %v; want done", st, err)
	}
	r.stop()

	h.recordRetention = time.Second
	r = h.start(t)
	testutil.Eventually(t, 2*time.Minute, func() error {
		if _, err := r.cli.Get(ctx, "kept"); !client.IsNotFound(err) {
			return fmt.Errorf("the record after its retention: %v, want not found", err)
		}
		return nil
	})
	r.stop()
	if recs := records(t, h.dataDir); len(recs) != 0 {
		t.Fatalf("the state file keeps %d records, want none", len(recs))
	}
}

// TestAJobsOutputStaysWhileItsLogsAreRead: the reaper does not remove a
// job's output while a log stream of it is open (the server copying its
// last lines), and does once the stream ends.
func TestAJobsOutputStaysWhileItsLogsAreRead(t *testing.T) {
	h := newHost(t, "process")
	h.retention = time.Second
	var out testutil.SyncBuffer
	log := zerolog.New(&out).Level(zerolog.DebugLevel)
	h.log = &log
	r := h.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := r.cli.Start(ctx, spec(t, "read", "echo one", "echo two")); err != nil {
		t.Fatal(err)
	}
	st, err := r.cli.Wait(ctx, "read")
	if err != nil || st.State != api.JobDone {
		t.Fatalf("wait: %+v, %v", st, err)
	}
	reading, release := make(chan struct{}), make(chan struct{})
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- r.agent.Logs(ctx, "read", runtime.LogOptions{Stdout: true, Stderr: true}, func(e api.JobLogEntry) error {
			if len(got) == 0 {
				close(reading)
				<-release
			}
			got = append(got, e.Line)
			return nil
		})
	}()
	<-reading
	// The reaper comes for it (the job's end plus a second) and leaves it.
	testutil.Eventually(t, 2*time.Minute, func() error {
		if !strings.Contains(out.String(), "waits for its log readers") {
			return fmt.Errorf("the reaper has not come for the job; agent log:\n%s", out.String())
		}
		return nil
	})
	dir := filepath.Join(h.dataDir, "jobs", "read")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the job's output went while it was read: %v", err)
	}
	close(release)
	if err := <-done; err != nil || len(got) != 2 {
		t.Fatalf("logs: %q, %v; want both lines", got, err)
	}
	testutil.Eventually(t, 3*time.Minute, func() error {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the job's files %s: %v, want removed once read", dir, err)
		}
		return nil
	})
}

// agentContainers lists the containers (any state) of the agent agentID.
func agentContainers(ctx context.Context, engine *mobyclient.Client, agentID string) ([]string, error) {
	f := make(mobyclient.Filters).Add("label", docker.LabelAgent+"="+agentID)
	list, err := engine.ContainerList(ctx, mobyclient.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range list.Items {
		out = append(out, fmt.Sprintf("%s (%s, job %s)", c.ID[:12], c.State, c.Labels[docker.LabelJob]))
	}
	return out, nil
}

// records reads the state file of a data dir no agent holds.
func records(t *testing.T, dataDir string) []state.Record {
	t.Helper()
	db, err := state.Open(filepath.Join(dataDir, "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs, err := db.All()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
