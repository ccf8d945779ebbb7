package daemon

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// Environment of a test binary re-executed as a server (serveForTest).
const (
	envServeDir    = "GPUD_TEST_SERVE_DIR"
	envServeListen = "GPUD_TEST_SERVE_LISTEN"
)

// serveForTest is the re-executed test binary acting as `gpud serve` with
// the process runtime and fake GPUs: it prints the admin token (first
// start only) and serves until SIGTERM, or until it is killed.
func serveForTest(dir, listen string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	srv, err := New(ctx, Options{DataDir: dir, Listen: listen, FakeGPUs: "8xH100:80GB", Runtime: "process", ResyncInterval: 2 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("READY %s\n", srv.AdminToken())
	if err := srv.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// serverProcess is a server running in a child process.
type serverProcess struct {
	cmd   *exec.Cmd
	token string
}

func startServerProcess(t *testing.T, dir, listen string) *serverProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envServeDir+"="+dir, envServeListen+"="+listen)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start server process: %v", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "READY") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("server process did not start: %q %v", line, err)
	}
	return &serverProcess{cmd: cmd, token: strings.TrimSpace(strings.TrimPrefix(line, "READY"))}
}

// shimDirs returns the job directories of the live process-runtime shims
// under dataDir (one per job the local agent runs).
func shimDirs(t *testing.T, dataDir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 4 && args[1] == "agent" && args[2] == "shim" && strings.HasPrefix(args[3], dataDir+"/") {
			dirs = append(dirs, filepath.Base(args[3]))
		}
	}
	return dirs
}

// TestServerKilledWithRunsActiveLosesAndDuplicatesNothing: a server
// process with 200 active runs (sleep commands on the process runtime) is
// killed with SIGKILL; while it is down, three jobs die. After a restart
// every run is still there with exactly one job, each surviving job is
// running in exactly one process (re-adopted, not started again), and the
// three dead jobs are reconciled as failed.
func TestServerKilledWithRunsActiveLosesAndDuplicatesNothing(t *testing.T) {
	const runs = 200
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	first := startServerProcess(t, dir, listen)
	ts := &testServer{t: t, admin: first.token, Server: &Server{url: "http://" + listen}}
	var wg sync.WaitGroup
	names := make(chan string, runs)
	for i := range runs {
		names <- fmt.Sprintf("r%03d", i)
	}
	close(names)
	for range 4 {
		wg.Go(func() {
			for n := range names {
				ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask(n, "default", 0)), nil)
			}
		})
	}
	wg.Wait()
	list := func() []api.Run {
		var out []api.Run
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs?all=true", nil, &out)
		return out
	}
	testutil.Eventually(t, 40*time.Second, func() error {
		if n := len(shimDirs(t, dir)); n < runs {
			time.Sleep(200 * time.Millisecond)
			return fmt.Errorf("%d of %d jobs started", n, runs)
		}
		return nil
	})
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	_ = first.cmd.Wait()

	// While the server is down, three jobs' commands die.
	dead := map[string]bool{}
	for _, jobDir := range shimDirs(t, dir)[:3] {
		dead[jobDir] = true
		killJobCommand(t, dir, jobDir)
	}

	second := startServerProcess(t, dir, listen)
	t.Cleanup(func() {
		for _, r := range list() {
			ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/"+r.Name+"/stop", api.StopRunRequest{Abort: true}, nil)
		}
		testutil.Eventually(t, 30*time.Second, func() error {
			if n := len(shimDirs(t, dir)); n > 0 {
				time.Sleep(200 * time.Millisecond)
				return fmt.Errorf("%d jobs still running", n)
			}
			return nil
		})
		_ = second.cmd.Process.Signal(syscall.SIGTERM)
		_ = second.cmd.Wait()
	})
	if second.token != "" {
		t.Fatalf("the restarted server made a new admin token")
	}
	var got []api.Run
	testutil.Eventually(t, 30*time.Second, func() error {
		got = list()
		running, failed := 0, 0
		for _, r := range got {
			switch r.Status {
			case "running":
				running++
			case "failed":
				failed++
			}
		}
		if len(got) != runs || running != runs-len(dead) || failed != len(dead) {
			time.Sleep(200 * time.Millisecond)
			return fmt.Errorf("%d runs: %d running, %d failed; want %d, %d running, %d failed", len(got), running, failed, runs, runs-len(dead), len(dead))
		}
		return nil
	})
	procs := map[string]int{}
	for _, d := range shimDirs(t, dir) {
		procs[d]++
	}
	for _, r := range got {
		if len(r.Jobs) != 1 || r.Attempt != 0 {
			t.Fatalf("run %s: %d jobs in attempt %d, want one job in attempt 0", r.Name, len(r.Jobs), r.Attempt)
		}
		j := r.Jobs[0]
		switch {
		case dead[j.ID] && (r.Status != "failed" || j.Status != "failed"):
			t.Errorf("run %s whose job died while the server was down: run %s, job %s (%s)", r.Name, r.Status, j.Status, j.Reason)
		case !dead[j.ID] && procs[j.ID] != 1:
			t.Errorf("run %s: job %s has %d processes, want 1", r.Name, j.ID, procs[j.ID])
		}
	}
	if len(procs) != runs-len(dead) {
		t.Errorf("%d jobs have processes, want %d", len(procs), runs-len(dead))
	}
}

// killJobCommand kills the process group of the job's command (the
// shim's child), as an OOM killer or a crash would; the shim records it.
func killJobCommand(t *testing.T, dataDir, jobDir string) {
	t.Helper()
	shim := ""
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasSuffix(strings.TrimRight(string(b), "\x00"), "\x00"+filepath.Join(dataDir, "agent", "jobs", jobDir)) {
			shim = e.Name()
		}
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || shim == "" {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == shim {
			pid, _ := strconv.Atoi(e.Name())
			if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill the command of %s: %v", jobDir, err)
			}
			return
		}
	}
	t.Fatalf("no command found for job %s (shim %q)", jobDir, shim)
}
