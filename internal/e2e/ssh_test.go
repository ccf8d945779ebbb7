package e2e

import (
	"context"
	"fmt"
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

// sshClient runs Debian's OpenSSH client (ssh, scp) with c's home, so
// it reads the config and keys gpud wrote there and ProxyCommand finds
// the server c logged in to.
func (c *cli) ssh(ctx context.Context, prog string, args ...string) result {
	c.t.Helper()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Dir, cmd.Env = c.home, c.env
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("%s %s: %v", prog, strings.Join(args, " "), err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// TestSSHReachesTheDevEnvironmentThroughTheServer drives the real ssh and
// scp through the entry `gpud ssh-config` writes: a shell command runs
// inside the dev environment (its working directory, its environment), a
// file is copied in with scp, a key the server did not register for the
// user is refused, and a user cannot reach a run of a project of which
// they are not a member. The host opens no port: the stream goes through
// the server to the agent's existing link.
func TestSSHReachesTheDevEnvironmentThroughTheServer(t *testing.T) {
	for _, prog := range []string{"ssh", "scp", "ssh-keygen"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Fatalf("%s is needed (apt-get install openssh-client): %v", prog, err)
		}
	}
	s := startServer(t, "process")
	ctx := timeout(t, 3*time.Minute)
	admin, err := api.NewClient(s.url, s.token, nil)
	if err != nil {
		t.Fatal(err)
	}
	echoPort := testutil.FreePort(t)
	dev := writeConfig(t, s.cli.home, "dev.yml", "type: dev-environment\nname: dev\nide: vscode\n"+
		"env:\n  - MARKER=inside-the-job\ninit:\n  - echo \"workdir=$(pwd)\"\n"+
		fmt.Sprintf("  - '(busybox nc -ll -p %d -e /bin/cat &)'\n", echoPort)+
		"  - echo \"cgroup=$(tr '\\n' ' ' < /proc/self/cgroup)\"\n"+
		// A memory limit puts the job in a cgroup of its own.
		"resources:\n  cpu: 0..\n  memory: 1MB..512MB\n  disk: 1GB..\n")
	submitted := s.cli.must(ctx, "run", "-y", "-d", dev)
	// The process runtime's working directory is made by the agent at the
	// start, so the link opens the host (the shell starts in that directory).
	link := "vscode://vscode-remote/ssh-remote+dev"
	if !strings.Contains(submitted.stderr, link) {
		t.Errorf("gpud run does not print the IDE link %s:\n%s", link, submitted.stderr)
	}
	t.Cleanup(func() { s.cli.run(context.Background(), "stop", "--abort", "dev") })
	waitRunning(t, s, "dev")
	var workdir string
	testutil.Eventually(t, 30*time.Second, func() error {
		m := regexp.MustCompile(`workdir=(/\S+)`).FindStringSubmatch(s.cli.must(ctx, "logs", "dev").stdout)
		if m == nil {
			return fmt.Errorf("the dev environment has not printed its working directory yet")
		}
		workdir = m[1]
		return nil
	})
	if run, _ := s.runStatus(t, "dev"); run.IDELink != link {
		t.Errorf("the run's ide_link is %q, want %q", run.IDELink, link)
	}

	out := s.cli.must(ctx, "ssh-config", "--no-include", "dev")
	config := filepath.Join(s.cli.home, ".gpud", "ssh", "config")
	if !strings.Contains(out.stdout, config) {
		t.Fatalf("ssh-config does not name %s:\n%s", config, out.stdout)
	}

	t.Run("a command runs inside the job", func(t *testing.T) {
		r := s.cli.ssh(ctx, "ssh", "-F", config, "dev", "echo hello; pwd; echo $MARKER")
		if r.code != 0 {
			t.Fatalf("ssh dev: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if want := "hello\n" + workdir + "\ninside-the-job\n"; r.stdout != want {
			t.Fatalf("ssh dev printed %q, want %q (the job's working directory and environment)", r.stdout, want)
		}
		if r := s.cli.ssh(ctx, "ssh", "-F", config, "dev", "exit 7"); r.code != 7 {
			t.Fatalf("ssh dev 'exit 7': exit %d, want the command's 7\n%s", r.code, r.stderr)
		}
		m := regexp.MustCompile(`cgroup=(.*)`).FindStringSubmatch(s.cli.must(ctx, "logs", "dev").stdout)
		if m == nil {
			t.Fatal("the dev environment did not print its cgroups")
		}
		if r := s.cli.ssh(ctx, "ssh", "-F", config, "dev", `echo "$(tr '\n' ' ' < /proc/self/cgroup)"`); r.code != 0 || strings.TrimSpace(r.stdout) != strings.TrimSpace(m[1]) {
			t.Fatalf("a session's cgroups are %q, the job's %q: the job's limits must bind it\n%s", r.stdout, m[1], r.stderr)
		}
		if r := s.cli.ssh(ctx, "ssh", "-tt", "-F", config, "dev", "tty"); r.code != 0 || !strings.Contains(r.stdout, "/dev/pts/") {
			t.Fatalf("ssh -tt dev tty: exit %d, %q, want a terminal\n%s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("a forward reaches the job's localhost and nothing else", func(t *testing.T) {
		checkForwards(t, ctx, s.cli, config, "dev", echoPort)
	})

	t.Run("scp copies a file into the job", func(t *testing.T) {
		local := filepath.Join(s.cli.home, "payload.txt")
		if err := os.WriteFile(local, []byte("copied-by-scp\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := s.cli.ssh(ctx, "scp", "-F", config, local, "dev:payload.txt"); r.code != 0 {
			t.Fatalf("scp: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		r := s.cli.ssh(ctx, "ssh", "-F", config, "dev", "cat "+workdir+"/payload.txt")
		if r.code != 0 || r.stdout != "copied-by-scp\n" {
			t.Fatalf("the copied file in the job: exit %d, %q\n%s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("a key the server did not register is refused", func(t *testing.T) {
		wrong := filepath.Join(s.cli.home, "wrong_key")
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", wrong).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
		b, err := os.ReadFile(config)
		if err != nil {
			t.Fatal(err)
		}
		good := filepath.Join(s.cli.home, ".gpud", "ssh", "id_ed25519")
		wrongConfig := writeConfig(t, s.cli.home, "wrong_config", strings.ReplaceAll(string(b), good, wrong))
		r := s.cli.ssh(ctx, "ssh", "-F", wrongConfig, "-o", "BatchMode=yes", "dev", "echo reached")
		if r.code == 0 || strings.Contains(r.stdout, "reached") || !strings.Contains(r.stderr, "Permission denied") {
			t.Fatalf("ssh with an unregistered key: exit %d, stdout %q, stderr %q; want Permission denied", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("an open SSH session keeps an inactive dev environment", func(t *testing.T) {
		idle := writeConfig(t, s.cli.home, "idle.yml", "type: dev-environment\nname: idle\ninactivity_duration: 3s\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n")
		s.cli.must(ctx, "run", "-y", "-d", idle)
		t.Cleanup(func() { s.cli.run(context.Background(), "stop", "--abort", "idle") })
		waitRunning(t, s, "idle")
		s.cli.must(ctx, "ssh-config", "--no-include", "idle")
		// The session outlives the 3s inactivity_duration twice over.
		r := s.cli.ssh(ctx, "ssh", "-F", config, "idle", "sleep 7; echo still-here")
		if r.code != 0 || r.stdout != "still-here\n" {
			t.Fatalf("a session into a dev environment with inactivity_duration 3s: exit %d, %q\n%s", r.code, r.stdout, r.stderr)
		}
		left := time.Now()
		testutil.Eventually(t, time.Minute, func() error {
			if run, _ := s.runStatus(t, "idle"); run.Status != "terminated" {
				return fmt.Errorf("run idle is %q (%s)", run.Status, run.Reason)
			}
			return nil
		})
		run, _ := s.runStatus(t, "idle")
		if !strings.Contains(run.Reason, "inactivity_duration 3s") {
			t.Errorf("the idle dev environment ended with %q, want inactivity_duration", run.Reason)
		}
		if time.Since(left) < 3*time.Second {
			t.Errorf("it stopped %s after the session ended, before its 3s of inactivity", time.Since(left))
		}
	})

	t.Run("another project's run is refused", func(t *testing.T) {
		if _, err := admin.CreateProject(ctx, "other"); err != nil {
			t.Fatal(err)
		}
		other := writeConfig(t, s.cli.home, "other.yml", "type: dev-environment\nname: secret-dev\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n")
		s.cli.must(ctx, "run", "-y", "-d", "--project", "other", other)
		t.Cleanup(func() { s.cli.run(context.Background(), "stop", "--abort", "--project", "other", "secret-dev") })
		alice, err := admin.CreateUser(ctx, api.CreateUserRequest{Name: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.SetMember(ctx, "main", "alice", api.RoleUser); err != nil {
			t.Fatal(err)
		}
		a := newCLI(t)
		a.must(ctx, "login", "--url", s.url, "--token", alice.Token)
		// gpud attach sets up ssh for a dev environment, and includes the
		// entries from ~/.ssh/config.
		if out := a.must(ctx, "attach", "dev"); !strings.Contains(out.stdout, "vscode://vscode-remote/ssh-remote+dev") {
			t.Errorf("gpud attach dev does not print the IDE link:\n%s", out.stdout)
		}
		aliceConfig := filepath.Join(a.home, ".ssh", "config")
		// Her own key reaches her project's run.
		if r := a.ssh(ctx, "ssh", "-F", aliceConfig, "dev", "echo alice-in"); r.code != 0 || r.stdout != "alice-in\n" {
			t.Fatalf("alice's ssh to her project's run: exit %d, %q\n%s", r.code, r.stdout, r.stderr)
		}
		// The other project's run exists and runs, but she is no member.
		r := a.ssh(ctx, "ssh", "-F", aliceConfig, "-o", "BatchMode=yes",
			"-o", "ProxyCommand="+gpudBin+" ssh-proxy --project other secret-dev", "dev", "echo reached")
		if r.code == 0 || strings.Contains(r.stdout, "reached") || !strings.Contains(r.stderr, "not found") {
			t.Fatalf("ssh to another project's run: exit %d, stdout %q, stderr %q; want it refused as not found", r.code, r.stdout, r.stderr)
		}
	})
}

// waitRunning waits for run name to be running.
func waitRunning(t *testing.T, s *server, name string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, func() error {
		if run, _ := s.runStatus(t, name); run.Status != "running" {
			return fmt.Errorf("run %s is %q", name, run.Status)
		}
		return nil
	})
}

// TestSSHReachesADockerDevEnvironmentsContainer drives the real ssh client
// into a dev environment on the Docker runtime: the command runs in the
// job's container (docker exec: its working directory, its environment),
// with a terminal when asked (-tt), and nothing is installed in the image.
func TestSSHReachesADockerDevEnvironmentsContainer(t *testing.T) {
	importBusybox(t)
	s := startServer(t, "docker")
	ctx := timeout(t, 3*time.Minute)
	dev := writeConfig(t, s.cli.home, "dev.yml", "type: dev-environment\nname: dock\nide: cursor\nimage: "+busyboxImage+
		"\nworking_dir: /tmp\nenv:\n  - MARKER=inside-the-container\ninit:\n  - echo \"host=$(hostname)\"\n"+
		"  - '(nc -ll -p 7000 -e /bin/cat &)'\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n")
	submitted := s.cli.must(ctx, "run", "-y", "-d", dev)
	t.Cleanup(func() { s.cli.run(context.Background(), "stop", "--abort", "dock") })
	if link := "cursor://vscode-remote/ssh-remote+dock/tmp"; !strings.Contains(submitted.stderr, link) {
		t.Errorf("gpud run does not print the IDE link %s:\n%s", link, submitted.stderr)
	}
	waitRunning(t, s, "dock")
	var host string
	testutil.Eventually(t, 30*time.Second, func() error {
		m := regexp.MustCompile(`host=(\S+)`).FindStringSubmatch(s.cli.must(ctx, "logs", "dock").stdout)
		if m == nil {
			return fmt.Errorf("the dev environment has not printed its hostname yet")
		}
		host = m[1]
		return nil
	})
	s.cli.must(ctx, "ssh-config", "--no-include", "dock")
	config := filepath.Join(s.cli.home, ".gpud", "ssh", "config")

	r := s.cli.ssh(ctx, "ssh", "-F", config, "dock", "echo hello; pwd; echo $MARKER; hostname")
	if want := "hello\n/tmp\ninside-the-container\n" + host + "\n"; r.code != 0 || r.stdout != want {
		t.Fatalf("ssh dock: exit %d, printed %q, want %q (the container's directory, environment and hostname)\n%s", r.code, r.stdout, want, r.stderr)
	}
	r = s.cli.ssh(ctx, "ssh", "-tt", "-F", config, "dock", "tty")
	if r.code != 0 || !strings.Contains(r.stdout, "/dev/pts/") {
		t.Fatalf("ssh -tt dock tty: exit %d, %q, want a terminal\n%s", r.code, r.stdout, r.stderr)
	}
	// The container's own localhost, where an IDE's server listens.
	checkForwards(t, ctx, s.cli, config, "dock", 7000)
}

// checkForwards checks SSH port forwarding (direct-tcpip, as ssh -L and
// IDEs use it) through ssh -W: to port on the job's localhost it reaches
// the job's echo server; to any other address it is refused.
func checkForwards(t *testing.T, ctx context.Context, c *cli, config, host string, port int) {
	t.Helper()
	var r result
	testutil.Eventually(t, 30*time.Second, func() error {
		cmd := exec.CommandContext(ctx, "ssh", "-F", config, "-W", fmt.Sprintf("localhost:%d", port), host)
		cmd.Dir, cmd.Env = c.home, c.env
		cmd.Stdin = strings.NewReader("ping through the forward\n")
		out, err := cmd.Output()
		if err != nil || string(out) != "ping through the forward\n" {
			return fmt.Errorf("ssh -W localhost:%d %s: %v, %q", port, host, err, out)
		}
		return nil
	})
	r = c.ssh(ctx, "ssh", "-F", config, "-o", "LogLevel=INFO", "-W", "192.0.2.1:80", host)
	if r.code == 0 || !strings.Contains(r.stderr, "prohibited") {
		t.Fatalf("ssh -W to an address outside the job: exit %d, stderr %q; want it administratively prohibited", r.code, r.stderr)
	}
}
