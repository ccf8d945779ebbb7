package daemon

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestSSHReachesADevEnvironmentOnAnSSHFleetHost: a dev environment on a
// host of an SSH fleet (an sshd container the server provisioned) is
// reached with the real ssh client through the entry `gpud ssh-config`
// writes: the stream goes through the server and the agent's SSH link to
// the host, which opens no port for it, and the command runs in the job
// there (its hostname, its environment).
func TestSSHReachesADevEnvironmentOnAnSSHFleetHost(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Fatalf("ssh is needed (apt-get install openssh-client): %v", err)
	}
	c := startSSHCluster(t, 1, "1xH100:80GB")
	c.must(http.StatusCreated, c.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(
		"type: dev-environment\nname: remote-dev\nide: windsurf\nenv:\n  - MARKER=on-the-fleet-host\n"+
			"init:\n  - echo \"host=$(hostname)\"\nresources:\n  gpu: 1\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n"), nil)
	var host string
	testutil.Eventually(t, 60*time.Second, func() error {
		run := c.run(t, "remote-dev")
		if run.Status != "running" {
			return testutil.Errorf("run %s (%s)", run.Status, run.Reason)
		}
		if run.IDELink != "windsurf://vscode-remote/ssh-remote+remote-dev" {
			t.Fatalf("ide_link %q", run.IDELink)
		}
		m := regexp.MustCompile(`host=(\S+)`).FindStringSubmatch(strings.Join(c.runLogs("remote-dev"), "\n"))
		if m == nil {
			return testutil.Errorf("no hostname in the logs yet")
		}
		host = m[1]
		return nil
	})
	// Its GPU is on the fleet's host only (the server's own has none).
	if h, _ := os.Hostname(); h == host {
		t.Fatalf("the dev environment runs on the test machine %s, not on the fleet host", host)
	}
	out, errs, err := sshThroughServer(t, c.testServer, c.bin, "remote-dev", "echo hello; hostname; echo $MARKER")
	if want := "hello\n" + host + "\non-the-fleet-host\n"; err != nil || out != want {
		t.Fatalf("ssh remote-dev: %v, printed %q, want %q\n%s", err, out, want, errs)
	}
}

// TestSSHReachesADevEnvironmentOnARegisteredHost: the same through a
// host that registered with `gpud agent --server` (the relay goes over
// its registration tunnel, the one connection the host dialed out).
func TestSSHReachesADevEnvironmentOnARegisteredHost(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Fatalf("ssh is needed (apt-get install openssh-client): %v", err)
	}
	rs := startRegServer(t, Options{})
	tok := rs.fleetWithToken(rs.admin, "main", "metal")
	_, _, agentOut := rs.agent(tok.Token, "", "metalhost", "1xH100:80GB")
	inst := rs.waitInstances("main", "metal", 1, agentOut)[0]
	rs.must(http.StatusCreated, rs.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(
		"type: dev-environment\nname: metal-dev\nenv:\n  - MARKER=on-the-registered-host\n"+
			"resources:\n  gpu: 1\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n"), nil)
	testutil.Eventually(t, 60*time.Second, func() error {
		var run api.Run
		rs.must(http.StatusOK, rs.admin, "GET", "/api/v1/projects/main/runs/metal-dev", nil, &run)
		if run.Status != "running" {
			return testutil.Errorf("run %s (%s)", run.Status, run.Reason)
		}
		if run.Jobs[0].Instance != inst.ID {
			t.Fatalf("the dev environment runs on %s, not on the registered host %s", run.Jobs[0].Instance, inst.ID)
		}
		return nil
	})
	out, errs, err := sshThroughServer(t, rs.testServer, rs.bin, "metal-dev", "echo hello; echo $MARKER")
	if want := "hello\non-the-registered-host\n"; err != nil || out != want {
		t.Fatalf("ssh metal-dev: %v, printed %q, want %q\n%s\nagent:\n%s", err, out, want, errs, agentOut.String())
	}
}

// sshThroughServer runs `gpud ssh-config RUN` (the binary bin, as the
// admin of ts) in a fresh home, then the real `ssh RUN command` with the
// entry it wrote.
func sshThroughServer(t *testing.T, ts *testServer, bin, run, command string) (string, string, error) {
	t.Helper()
	home := t.TempDir()
	env := []string{"HOME=" + home, "GPUD_HOME=" + filepath.Join(home, ".gpud"), "GPUD_SERVER=" + ts.URL(),
		"GPUD_TOKEN=" + ts.admin, "PATH=" + os.Getenv("PATH")}
	exe := func(name string, args ...string) (string, string, error) {
		cmd := exec.Command(name, args...)
		cmd.Env, cmd.Dir = env, home
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	if out, errs, err := exe(bin, "ssh-config", "--no-include", run); err != nil {
		t.Fatalf("gpud ssh-config: %v\n%s%s", err, out, errs)
	}
	return exe("ssh", "-F", filepath.Join(home, ".gpud", "ssh", "config"), run, command)
}
