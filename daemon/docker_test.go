package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/internal/testutil/dockerimage"
)

// startDockerServer builds the busybox test image and starts a server
// whose local agent picks its runtime itself, as `gpud serve` does.
func startDockerServer(t testing.TB) *testServer {
	t.Helper()
	return startContainerServer(t, Options{})
}

// startContainerServer is startDockerServer with more options; the
// busybox image stands in for the default image (no registry here).
func startContainerServer(t testing.TB, opts Options) *testServer {
	t.Helper()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dockerimage.Build(ctx, cli); err != nil { // shared by every test: never removed
		t.Fatalf("these tests need a reachable Docker engine and busybox-static (CI's .ci/run starts dockerd): %v", err)
	}
	opts.FakeGPUs, opts.DefaultImage = "1xH100:80GB", dockerimage.Ref
	return startServerWith(t, opts)
}

// runLogs returns the run's output lines.
func (ts *testServer) runLogs(run string) []string {
	ts.t.Helper()
	return lineTexts(ts.getLogs(run, ""))
}

// waitRunEnd waits until the run has finished and returns it.
func (ts *testServer) waitRunEnd(name string, timeout time.Duration) api.Run {
	ts.t.Helper()
	var run api.Run
	testutil.Eventually(ts.t, timeout, func() error {
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/"+name, nil, &run)
		if !finishedRun(run.Status) {
			return fmt.Errorf("run %s is %s (%s)", name, run.Status, run.Reason)
		}
		return nil
	})
	return run
}

// TestLocalAgentRunsEveryJobInDockerImagelessOnesInTheDefaultImage: with
// Docker reachable, a task with an image runs in a container (its output
// and exit code come back through the API) and an image-less task, like
// testdata/hello.yml, runs in a container of the server's default image,
// never as a host process (issue 11 #0; the embedded server keeps
// processes, TestEmbeddedRunsImagelessTasksAsTheInvokingUserInTheirOwnDirectory).
func TestLocalAgentRunsEveryJobInDockerImagelessOnesInTheDefaultImage(t *testing.T) {
	ts := startDockerServer(t)
	var insts []api.Instance
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/instances", nil, &insts)
	if len(insts) != 1 || insts[0].Runtime != "docker" {
		t.Fatalf("local instance runtime: %+v, want docker", insts)
	}
	cases := []struct {
		name, config string
		status       string
		code         int
		line         string
	}{
		{"in-docker", "type: task\nname: in-docker\nimage: " + dockerimage.Ref + "\ncommands:\n  - test -x /bin/busybox\n  - echo from-the-container $DSTACK_RUN_NAME\n  - exit 7\n", "failed", 7, "from-the-container in-docker"},
		{"no-image", "type: task\nname: no-image\ncommands:\n  - test -x /bin/busybox\n  - echo from-the-default-image $GPUD_RUN_NAME\n", "done", 0, "from-the-default-image no-image"},
	}
	for _, c := range cases {
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(c.config), nil)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := ts.waitRunEnd(c.name, 60*time.Second)
			if run.Status != c.status || run.ExitCode == nil || *run.ExitCode != c.code {
				t.Fatalf("run %s: status %s (%s), exit code %v; want %s with %d", c.name, run.Status, run.Reason, run.ExitCode, c.status, c.code)
			}
			lines := ts.runLogs(c.name)
			if !strings.Contains(strings.Join(lines, "\n"), c.line) {
				t.Fatalf("logs of %s: %q, want a line %q", c.name, lines, c.line)
			}
		})
	}
}
