package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"gpud.dev/gpud/agent/runtime/docker"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/internal/testutil/dockerimage"
)

// removeContainers removes every container the server's local agent made
// (running or not), so tests leave none behind on the shared engine.
func removeContainers(t testing.TB, srv *Server) {
	t.Helper()
	if srv.hosts.local == nil || !strings.Contains(srv.hosts.local.agent.RuntimeName(), "docker") {
		return
	}
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Errorf("docker client: %v", err)
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range agentContainers(t, cli, srv.hosts.local.id) {
		if _, err := cli.ContainerRemove(ctx, c, client.ContainerRemoveOptions{Force: true}); err != nil {
			t.Errorf("remove container %s: %v", c, err)
		}
	}
}

// agentContainers lists the ids of the containers labelled with agent id.
func agentContainers(t testing.TB, cli *client.Client, id string) []string {
	t.Helper()
	f := make(client.Filters).Add("label", docker.LabelAgent+"="+id)
	list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatalf("list containers of %s: %v", id, err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// TestServersSharingADockerEngineAdoptOnlyTheirOwnContainers: two servers
// on two data dirs and one Docker engine label their containers with
// different agent ids; starting the second leaves the first's running
// container alone (it neither adopts nor stops it), and the first, started
// again on its data dir, keeps its id and re-adopts its job.
func TestServersSharingADockerEngineAdoptOnlyTheirOwnContainers(t *testing.T) {
	first := startDockerServer(t)
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	firstID := first.hosts.local.id
	first.must(http.StatusCreated, first.admin, "POST", "/api/v1/projects/main/runs/apply",
		yamlApply("type: task\nname: kept\nimage: "+dockerimage.Ref+"\ncommands: [echo up, sleep 300]\n"), nil)
	waitRunStatus(first, "kept", "running")
	mine := agentContainers(t, cli, firstID)
	if len(mine) != 1 {
		t.Fatalf("first server's containers (label %s): %v, want 1", firstID, mine)
	}

	second := startServerWith(t, Options{FakeGPUs: "1xH100:80GB"})
	cases := []struct {
		name  string
		check func() error
	}{
		{"the ids differ and are per data dir", func() error {
			if !strings.HasPrefix(firstID, "local-") || !strings.HasPrefix(second.hosts.local.id, "local-") || firstID == second.hosts.local.id {
				return fmt.Errorf("agent ids %q and %q, want two different local-<hash> ids", firstID, second.hosts.local.id)
			}
			return nil
		}},
		{"the second adopted nothing", func() error {
			if jobs := second.hosts.local.agent.List(); len(jobs) != 0 {
				return fmt.Errorf("second server's agent has %+v, want no job", jobs)
			}
			return nil
		}},
		{"the first's container still runs", func() error {
			ins, err := cli.ContainerInspect(context.Background(), mine[0], client.ContainerInspectOptions{})
			if err != nil || ins.Container.State == nil || !ins.Container.State.Running {
				return fmt.Errorf("container %s: %v %+v, want running", mine[0], err, ins.Container.State)
			}
			return nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.check(); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("the first keeps its id and re-adopts its job after a restart", func(t *testing.T) {
		dir := first.opts.DataDir
		if err := first.Close(); err != nil {
			t.Fatal(err)
		}
		again := startServerWith(t, Options{DataDir: dir, FakeGPUs: "1xH100:80GB", RotateAdminToken: true})
		if again.hosts.local.id != firstID {
			t.Fatalf("agent id after restart %q, want %q", again.hosts.local.id, firstID)
		}
		jobs := again.hosts.local.agent.List()
		if len(jobs) != 1 || jobs[0].State != api.JobRunning {
			t.Fatalf("re-adopted jobs %+v, want the running one", jobs)
		}
		waitRunStatus(again, "kept", "running")
	})
}

// waitRunStatus waits until the run named name has status want.
func waitRunStatus(ts *testServer, name, want string) {
	ts.t.Helper()
	testutil.Eventually(ts.t, time.Minute, func() error {
		var run api.Run
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/"+name, nil, &run)
		if run.Status != want {
			return fmt.Errorf("run %s is %s (%s), want %s", name, run.Status, run.Reason, want)
		}
		return nil
	})
}

// TestLocalAgentIDIsKeptPerDataDir: a fresh data dir gets local-<hash>,
// read back unchanged at the next start even from another path; an agent
// dir used before ids were kept keeps the former "local" so its running
// jobs are still adopted.
func TestLocalAgentIDIsKeptPerDataDir(t *testing.T) {
	cases := []struct {
		name    string
		prepare func(agentDir string) error
		want    func(dataDir string) string
	}{
		{"fresh data dir", func(string) error { return nil }, func(dataDir string) string {
			sum := sha256.Sum256([]byte(dataDir))
			return "local-" + hex.EncodeToString(sum[:6])
		}},
		{"agent dir from before ids were kept", func(agentDir string) error {
			return os.WriteFile(filepath.Join(agentDir, "agent.db"), nil, 0o600)
		}, func(string) string { return "local" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dataDir := t.TempDir()
			agentDir := filepath.Join(dataDir, "agent")
			if err := os.MkdirAll(agentDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := c.prepare(agentDir); err != nil {
				t.Fatal(err)
			}
			id, err := localAgentID(dataDir, agentDir)
			if err != nil || id != c.want(dataDir) {
				t.Fatalf("id %q (%v), want %q", id, err, c.want(dataDir))
			}
			moved := filepath.Join(t.TempDir(), "moved")
			if err := os.Rename(dataDir, moved); err != nil {
				t.Fatal(err)
			}
			again, err := localAgentID(moved, filepath.Join(moved, "agent"))
			if err != nil || again != id {
				t.Fatalf("id after a move %q (%v), want %q kept", again, err, id)
			}
		})
	}
}
