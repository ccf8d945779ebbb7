package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/internal/testutil/dockerimage"
)

// probeTask is an image-less task, submitted by a member with role user,
// that reports who and where it runs and whether it can read the server's
// state key.
func probeTask(name, dataDir string) string {
	return fmt.Sprintf(`type: task
name: %s
commands:
  - id -u
  - pwd
  - cat %s/state.key >/dev/null 2>&1 && echo READ-THE-STATE-KEY || echo no-state-key
resources:
  cpu: 0..
  memory: 1MB..
  disk: 1GB..
`, name, dataDir)
}

// userMember makes a member with role user of project main; its token.
func (ts *testServer) userMember(name string) string {
	tok := ts.user(name)
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/members/"+name, api.SetMemberRequest{Role: "user"}, nil)
	return tok
}

// Issue 11 #0: an image-less run of a user-role member ran on the
// server's local agent as a host process, as root, in the server's
// working directory, and read state.key. On a `gpud serve`-style server
// (default options, Docker reachable) it now runs in a container of the
// server's default image, where the server's files do not exist.
func TestUserImagelessRunOnServeRunsInTheDefaultImageNotOnTheHost(t *testing.T) {
	ts := startDockerServer(t)
	mallory := ts.userMember("mallory")
	ts.must(http.StatusCreated, mallory, "POST", "/api/v1/projects/main/runs/apply", yamlApply(probeTask("probe", ts.opts.DataDir)), nil)
	run := ts.waitRunEnd("probe", 60*time.Second)
	out := ts.runLogs("probe")
	if run.Status != "done" || !slices.Contains(out, "no-state-key") || slices.Contains(out, "READ-THE-STATE-KEY") {
		t.Fatalf("run %s (%s), output %q; want done without the state key", run.Status, run.Reason, out)
	}
	if img := containerImage(t, run); img != dockerimage.Ref {
		t.Fatalf("container image %s, want the default image %s", img, dockerimage.Ref)
	}
}

// A privileged container on the server's own host is root there (it can
// mount the host's disks): a user-role member's `privileged: true` run is
// refused by its plan with the fix (the local agent reports that its
// admin did not allow privileged jobs), unless the admin started the
// server with --allow-privileged. The agent refuses such a job at start
// too (agent.TestAgentsRefusePrivilegedJobsUnlessTheirAdminAllowsThem).
func TestPrivilegedRunsAreRefusedOnTheServersOwnHost(t *testing.T) {
	ts := startDockerServer(t)
	mallory := ts.userMember("mallory")
	task := "type: task\nname: priv\nimage: " + dockerimage.Ref + "\nprivileged: true\ncommands:\n  - echo ran-privileged\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n"
	status, se := ts.call(mallory, "POST", "/api/v1/projects/main/runs/apply", yamlApply(task), nil)
	if status != http.StatusUnprocessableEntity || !strings.Contains(se.Error(), "privileged") || !strings.Contains(se.Error(), "--allow-privileged") {
		t.Fatalf("apply: %d %s, want 422 naming privileged and --allow-privileged", status, se.Error())
	}
	if st, _ := ts.call(ts.admin, "GET", "/api/v1/projects/main/runs/priv", nil, nil); st != http.StatusNotFound {
		t.Fatalf("the refused run exists: GET status %d", st)
	}
}

// With the process runtime opted in (gpud serve --runtime process, the
// server root), a user-role member's job runs as nobody, in a fresh
// directory of its own, and cannot read the server's state key.
func TestProcessRuntimeOnServeRunsJobsUnprivilegedOutsideTheServersFiles(t *testing.T) {
	testutil.NeedRoot(t, "the process runtime switches users only as root")
	ts := startServer(t, "")
	mallory := ts.userMember("mallory")
	ts.must(http.StatusCreated, mallory, "POST", "/api/v1/projects/main/runs/apply", yamlApply(probeTask("probe", ts.opts.DataDir)), nil)
	run := ts.waitRunEnd("probe", 30*time.Second)
	out := ts.runLogs("probe")
	if run.Status != "done" || len(out) != 3 {
		t.Fatalf("run %s (%s), output %q", run.Status, run.Reason, out)
	}
	serverCwd, _ := os.Getwd()
	if out[0] == "0" {
		t.Errorf("id -u = 0: the job ran as root")
	}
	if out[1] == serverCwd || strings.HasPrefix(out[1], ts.opts.DataDir) {
		t.Errorf("pwd = %s: the server's working directory or data dir", out[1])
	}
	if out[2] != "no-state-key" {
		t.Errorf("the job read the server's state key: %q", out)
	}
	for _, d := range []string{ts.opts.DataDir, filepath.Join(ts.opts.DataDir, "agent")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want mode 0700", d, fi, err)
		}
	}
}

// The embedded laptop mode (gpud run with no server) still runs the
// README's image-less hello.yml as a process of the invoking user, and
// prints its output, but in a directory of its own, not the data dir.
func TestEmbeddedRunsImagelessTasksAsTheInvokingUserInTheirOwnDirectory(t *testing.T) {
	dataDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	srv, _, token, err := StartEmbedded(ctx, EmbeddedOptions{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); srv.Close(); removeContainers(t, srv) })
	ts := &testServer{Server: srv, t: t, admin: token}
	hello, err := os.ReadFile("../testdata/hello.yml")
	if err != nil {
		t.Fatal(err)
	}
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(string(hello)), nil)
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(probeTask("probe", dataDir)), nil)
	if run := ts.waitRunEnd("hello", 30*time.Second); run.Status != "done" {
		t.Fatalf("hello: %s (%s)", run.Status, run.Reason)
	}
	if out := ts.runLogs("hello"); !slices.Contains(out, "hello from gpud run hello") {
		t.Fatalf("hello printed %q", out)
	}
	run := ts.waitRunEnd("probe", 30*time.Second)
	out := ts.runLogs("probe")
	if run.Status != "done" || len(out) != 3 {
		t.Fatalf("probe %s (%s), output %q", run.Status, run.Reason, out)
	}
	serverCwd, _ := os.Getwd()
	if out[0] != fmt.Sprint(os.Geteuid()) {
		t.Errorf("id -u = %s, want the invoking user's %d", out[0], os.Geteuid())
	}
	if out[1] == serverCwd || strings.HasPrefix(out[1], dataDir) {
		t.Errorf("pwd = %s: the server's working directory or data dir", out[1])
	}
}

// Issue 11 #6: a job's resolved secret stayed in plaintext in the local
// agent's agent.db and jobs/<job>/launch.json after the job ended (and a
// secret interpolated into a command sat in state.db's job spec). Now no
// file under the server's data dir (the agent's, agent.db included) holds
// it while the job runs or after, and there is no launch file.
func TestNoFileUnderTheDataDirHoldsAJobsSecret(t *testing.T) {
	ts := startServer(t, "")
	raw := make([]byte, 16)
	rand.Read(raw)
	secret := "s3cret-" + hex.EncodeToString(raw)
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/secrets/TOKEN", api.SetSecretRequest{Value: secret}, nil)
	ts.submit(`type: task
name: holds-secret
env:
  - TOKEN=${{ secrets.TOKEN }}
commands:
  - ': ${{ secrets.TOKEN }}; test -n "$TOKEN" && echo has-secret'
  - sleep 300
resources:
  cpu: 0..
  memory: 1MB..
  disk: 1GB..
`)
	testutil.Eventually(t, 30*time.Second, func() error {
		if out := ts.runLogs("holds-secret"); !slices.Contains(out, "has-secret") {
			return fmt.Errorf("output %q", out)
		}
		return nil
	})
	check := func(when string) {
		t.Helper()
		err := filepath.WalkDir(ts.opts.DataDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			if d.Name() == "launch.json" {
				t.Errorf("%s: %s exists", when, p)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s: %s holds the secret in plaintext", when, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check("while the job runs")
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/holds-secret/stop", api.StopRunRequest{}, nil)
	job := ts.waitRunEnd("holds-secret", 30*time.Second).Jobs[0].ID
	testutil.Eventually(t, 20*time.Second, func() error {
		if st, err := ts.hosts.local.agent.Get(job); err != nil || !st.State.Finished() {
			return fmt.Errorf("agent job %s: %+v %v", job, st, err)
		}
		return nil
	})
	check("after the job ended")
}

// Docker unreachable on `gpud serve` without --runtime process once meant
// a silent fallback to host processes; now an image-less run fails with a
// reason that says what to do.
func TestServeWithoutDockerFailsRunsWithTheFixInsteadOfRunningThemOnTheHost(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	ts := startServerWith(t, Options{FakeGPUs: "1xH100:80GB"})
	ts.submit(probeTask("probe", ts.opts.DataDir))
	run := ts.waitRunEnd("probe", 30*time.Second)
	if run.Status != "failed" || !strings.Contains(run.Reason, "Docker is not reachable") || !strings.Contains(run.Reason, "--runtime process") {
		t.Fatalf("run %s (%s), want failed with the fix", run.Status, run.Reason)
	}
	if out := ts.runLogs("probe"); len(out) > 0 {
		t.Fatalf("the run printed %q: it ran somewhere", out)
	}
}
