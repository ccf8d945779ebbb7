package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/internal/testutil"
)

// gpudBin is the binary TestMain builds; repo is the repository root.
var gpudBin, repo string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpud-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		wd, _ := os.Getwd()
		repo = filepath.Join(wd, "..", "..")
		gpudBin = filepath.Join(dir, "gpud")
		build := exec.Command("go", "build", "-o", gpudBin, ".")
		build.Dir = repo
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build gpud: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// result is one finished gpud invocation.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs gpud commands with a private home: GPUD_HOME and HOME point
// into a temporary directory, and no GPUD_SERVER/GPUD_TOKEN leak in from
// the environment, so "no server configured" means exactly that.
type cli struct {
	t    testing.TB
	home string
	env  []string
}

func newCLI(t testing.TB) *cli {
	// Not t.TempDir(): its long name would push the local agent's unix
	// socket path past the kernel's 108-byte limit.
	home, err := os.MkdirTemp("", "gpud-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		testutil.KillJobsUnder(home) // process jobs' shims outlive the server by design
		os.RemoveAll(home)
	})
	env := []string{"HOME=" + home, "GPUD_HOME=" + filepath.Join(home, ".gpud"), "PATH=" + os.Getenv("PATH")}
	return &cli{t: t, home: home, env: env}
}

// run runs gpud with args in the repository root, stdin empty (not a TTY).
func (c *cli) run(ctx context.Context, args ...string) result {
	c.t.Helper()
	cmd := exec.CommandContext(ctx, gpudBin, args...)
	cmd.Dir, cmd.Env = repo, c.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("gpud %s: %v", strings.Join(args, " "), err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// must runs gpud and fails the test unless it exits 0.
func (c *cli) must(ctx context.Context, args ...string) result {
	c.t.Helper()
	r := c.run(ctx, args...)
	if r.code != 0 {
		c.t.Fatalf("gpud %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

func timeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestRunOnEmbeddedDefault(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout []string
		wantStderr []string
	}{
		{name: "hello prints its output and exits 0", args: []string{"run", "testdata/hello.yml"},
			wantStdout: []string{"hello from gpud run hello", "gpus on this node: 0"},
			wantStderr: []string{"no server configured (gpud login to use one): running on an embedded server in this process", "process runtime"}},
		{name: "a failing task's exit code is gpud's", args: []string{"run", "testdata/fail.yml"}, wantCode: 3,
			wantStdout: []string{"about to fail"}, wantStderr: []string{"run fail failed"}},
		{name: "the embedded server has only project main", args: []string{"run", "-p", "research", "testdata/hello.yml"},
			wantCode: 2, wantStderr: []string{"only project main"}},
		{name: "detaching needs a server", args: []string{"run", "-d", "testdata/hello.yml"},
			wantCode: 2, wantStderr: []string{"-d needs a server"}},
		{name: "a flag after the file is named with the fix", args: []string{"run", "testdata/hello.yml", "-y"},
			wantCode: 2, wantStderr: []string{"put flags before it, like gpud run -y testdata/hello.yml"}},
		{name: "two files are a usage error", args: []string{"run", "testdata/hello.yml", "testdata/fail.yml"},
			wantCode: 2, wantStderr: []string{"give exactly one file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newCLI(t).run(timeout(t, 2*time.Minute), tt.args...)
			if r.code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tt.wantCode, r.stdout, r.stderr)
			}
			for _, s := range tt.wantStdout {
				if !strings.Contains(r.stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
				}
			}
			for _, s := range tt.wantStderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
				}
			}
			// Said once, in plain text: stderr is a pipe here.
			if n := strings.Count(r.stderr, "no server configured"); n > 1 || strings.Contains(r.stderr, "\x1b[") {
				t.Errorf("stderr says \"no server configured\" %d times or has escape codes:\n%q", n, r.stderr)
			}
		})
	}
}

func TestRunRejectsInvalidConfigurationWithPosition(t *testing.T) {
	c := newCLI(t)
	path := filepath.Join(c.home, "bad.yml")
	if err := os.WriteFile(path, []byte("type: task\ncommands: [echo hi]\nresources:\n  gpu: H100:x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := c.run(timeout(t, time.Minute), "run", path)
	if r.code != 1 || !strings.Contains(r.stderr, "bad.yml:4:") || !strings.Contains(r.stderr, "resources.gpu") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and an error at bad.yml:4 naming resources.gpu", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(c.home, ".gpud", "server")); err == nil {
		t.Fatal("an invalid file started the embedded server")
	}
}

func TestCommandsWithoutServerSayHowToLogIn(t *testing.T) {
	for _, args := range [][]string{{"ps"}, {"queue", "list"}, {"logs", "x"}, {"secret", "list"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := newCLI(t).run(timeout(t, time.Minute), args...)
			if r.code != 1 || !strings.Contains(r.stderr, "gpud login") {
				t.Fatalf("exit %d, stderr %q; want exit 1 naming gpud login", r.code, r.stderr)
			}
		})
	}
}

// server is a `gpud serve` process with a logged-in client.
type server struct {
	url, token string
	cli        *cli
}

// removeContainers removes the containers of the local agent of the server
// on dataDir (labelled with the id it keeps in agent/agent-id), so a test
// leaves none behind on the shared Docker engine.
func removeContainers(t *testing.T, dataDir string) {
	t.Helper()
	id, err := os.ReadFile(filepath.Join(dataDir, "agent", "agent-id"))
	if err != nil {
		t.Errorf("local agent id: %v", err)
		return
	}
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=dev.gpud.agent="+strings.TrimSpace(string(id))).Output()
	if err != nil {
		t.Errorf("list containers: %v", err)
		return
	}
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		if out, err := exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).CombinedOutput(); err != nil {
			t.Errorf("remove containers: %v: %s", err, out)
		}
	}
}

// startServer runs gpud serve on a free port with the given runtime (and
// extra serve flags) and logs the client in with the admin token it
// prints once.
func startServer(t *testing.T, runtime string, extra ...string) *server {
	t.Helper()
	c := newCLI(t)
	port := testutil.FreePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	args := append([]string{"serve", "--data-dir", filepath.Join(c.home, "server"), "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--runtime", runtime}, extra...)
	cmd := exec.CommandContext(ctx, gpudBin, args...)
	cmd.Env = c.env
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("gpud serve logs:\n%s", logs.String())
		}
		if runtime != "process" {
			removeContainers(t, filepath.Join(c.home, "server"))
		}
	})
	tokens := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		next := false
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if next {
				tokens <- line
				next = false
			}
			next = strings.HasPrefix(line, "Admin token")
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var token string
	select {
	case token = <-tokens:
	case <-time.After(time.Minute):
		t.Fatalf("gpud serve printed no admin token within a minute; logs:\n%s", logs.String())
	}
	c.must(timeout(t, time.Minute), "login", "--url", url, "--token", token)
	return &server{url: url, token: token, cli: c}
}

func TestInterruptWithoutTerminalStopsTheRunAndExitsWithItsCode(t *testing.T) {
	c := newCLI(t)
	path := filepath.Join(c.home, "long.yml")
	task := "type: task\nname: long\ncommands:\n  - echo begin\n  - sleep 120\nresources:\n  disk: 1GB..\n"
	if err := os.WriteFile(path, []byte(task), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(timeout(t, 2*time.Minute), gpudBin, "run", path)
	cmd.Dir, cmd.Env = repo, c.env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once the job's output shows it runs.
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "begin" {
		t.Fatalf("first line %q, %v; want begin\nstderr:\n%s", line, err, errb.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 143 {
		t.Fatalf("exit %v, want 143 (the job ended by SIGTERM)\nstderr:\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "stopping run long") || !strings.Contains(errb.String(), "stopped by") {
		t.Fatalf("stderr does not say the run was stopped:\n%s", errb.String())
	}
}
