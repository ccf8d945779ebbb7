package runtime_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/agent/runtime/docker"
	"gpud.dev/gpud/agent/runtime/process"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/internal/testutil/dockerimage"
)

func TestMain(m *testing.M) { dockerimage.Main(m) }

// target is one runtime under test plus how specs differ for it.
type target struct {
	name string
	open func(t *testing.T, dataDir, agentID string) runtime.Runtime
	// workDir is a writable working directory for the job.
	workDir func(t *testing.T) string
	// dataDir and agentID are those the runtime under test was opened with.
	dataDir, agentID string
}

func targets() []target {
	return []target{
		{
			name: "docker",
			open: func(t *testing.T, dataDir, agentID string) runtime.Runtime {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				rt, err := docker.New(ctx, docker.Config{DataDir: dataDir, AgentID: agentID})
				if err != nil {
					t.Fatalf("docker runtime: %v", err)
				}
				return rt
			},
			workDir: func(*testing.T) string { return "/tmp" },
		},
		{
			name: "process",
			open: func(t *testing.T, dataDir, agentID string) runtime.Runtime {
				rt, err := process.New(process.Config{DataDir: dataDir, AgentID: agentID, ShimCommand: dockerimage.ShimCommand()})
				if err != nil {
					t.Fatalf("process runtime: %v", err)
				}
				return rt
			},
			workDir: func(t *testing.T) string { return t.TempDir() },
		},
	}
}

// jobSpec returns a spec running commands with the test image.
func jobSpec(t *testing.T, commands ...string) api.JobSpec {
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	id = fmt.Sprintf("%s-%d", id[max(0, len(id)-60):], time.Now().UnixNano()%1e6)
	return api.JobSpec{ID: id, RunName: "test-run", Image: dockerimage.Ref, Commands: commands}
}

// started starts spec and removes the job when the test ends.
func started(t *testing.T, rt runtime.Runtime, spec api.JobSpec) runtime.Handle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := rt.Start(ctx, spec, nil)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rt.Stop(ctx, h, 0)
		rt.Wait(ctx, h)
		if err := rt.Remove(ctx, h); err != nil {
			t.Errorf("remove: %v", err)
		}
	})
	return h
}

func wait(t *testing.T, rt runtime.Runtime, h runtime.Handle) runtime.Exit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := rt.Wait(ctx, h)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return e
}

func logs(t *testing.T, rt runtime.Runtime, h runtime.Handle, opts runtime.LogOptions) []api.JobLogEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []api.JobLogEntry
	if err := rt.Logs(ctx, h, opts, func(e api.JobLogEntry) error { out = append(out, e); return nil }); err != nil {
		t.Fatalf("logs: %v", err)
	}
	return out
}

func lines(entries []api.JobLogEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, string(e.Stream)+":"+e.Line)
	}
	return out
}

var allStreams = runtime.LogOptions{Stdout: true, Stderr: true}

// TestRuntimes runs one table of behaviours against both runtimes.
func TestRuntimes(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, tg target, rt runtime.Runtime)
	}{
		{"environment carries the job env and the DSTACK and GPUD cluster variables", testEnvironment},
		{"the exit code of the failing command is the job's exit code", testExitCode},
		{"commands run in order and stop at the first failure", testCommandsInOrder},
		{"logs keep the order of stdout and stderr lines", testLogOrder},
		{"logs follow streams lines while the job runs and end with it", testLogFollow},
		{"stop sends SIGTERM and lets the job exit gracefully", testStopGraceful},
		{"stop sends SIGKILL when the grace period runs out", testStopKill},
		{"a published port is reachable from the host", testPort},
		{"with the host network the job binds host ports itself", testHostNetwork},
		{"a memory limit is enforced and reported as an OOM kill", testOOM},
		{"user and working directory apply to the job", testUserWorkdir},
		{"a new runtime instance adopts running and ended jobs", testAdopt},
		{"usage reports the memory and CPU of a running job", testUsage},
	}
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) {
			tg.dataDir, tg.agentID = t.TempDir(), "t"+fmt.Sprint(time.Now().UnixNano())
			rt := tg.open(t, tg.dataDir, tg.agentID)
			defer rt.Close()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, tg, rt) })
			}
		})
	}
}

func testEnvironment(t *testing.T, _ target, rt runtime.Runtime) {
	spec := jobSpec(t, "env", `cat "$DSTACK_MPI_HOSTFILE"`)
	spec.Env = map[string]string{"GREETING": "hello world"}
	spec.GPUs = api.JobGPUs{Devices: []string{"0", "1"}, Share: 0.5}
	spec.Cluster = api.JobCluster{NodeRank: 1, NodesNum: 2, MasterNodeIP: "10.0.0.1", NodesIPs: []string{"10.0.0.1", "10.0.0.2"}, GPUsPerNode: 2}
	h := started(t, rt, spec)
	if e := wait(t, rt, h); e.Code != 0 {
		t.Fatalf("exit = %+v, want 0", e)
	}
	got := lines(logs(t, rt, h, allStreams))
	want := []string{
		"stdout:GREETING=hello world",
		"stdout:DSTACK_RUN_NAME=test-run", "stdout:GPUD_RUN_NAME=test-run",
		"stdout:DSTACK_NODE_RANK=1", "stdout:GPUD_NODE_RANK=1",
		"stdout:DSTACK_NODES_NUM=2", "stdout:DSTACK_MASTER_NODE_IP=10.0.0.1",
		"stdout:DSTACK_NODES_IPS=10.0.0.1", "stdout:10.0.0.2", // newline-separated, as dstack
		"stdout:DSTACK_GPUS_PER_NODE=2", "stdout:DSTACK_GPUS_NUM=4", "stdout:GPUD_GPUS_NUM=4",
		"stdout:NVIDIA_VISIBLE_DEVICES=0,1", "stdout:CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
		"stdout:10.0.0.1 slots=2", "stdout:10.0.0.2 slots=2",
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("output lacks %q; got %q", w, got)
		}
	}
	if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "stdout:DSTACK_MPI_HOSTFILE=/") }) {
		t.Errorf("DSTACK_MPI_HOSTFILE missing: %q", got)
	}
}

func testExitCode(t *testing.T, _ target, rt runtime.Runtime) {
	for _, code := range []int{0, 3, 42} {
		h := started(t, rt, jobSpec(t, fmt.Sprintf("exit %d", code)))
		if e := wait(t, rt, h); e.Code != code || e.OOMKilled || e.Signal != "" {
			t.Errorf("exit %d: got %+v", code, e)
		}
	}
}

func testCommandsInOrder(t *testing.T, _ target, rt runtime.Runtime) {
	h := started(t, rt, jobSpec(t, "echo one", "echo two", "false", "echo never"))
	if e := wait(t, rt, h); e.Code != 1 {
		t.Fatalf("exit = %+v, want 1", e)
	}
	if got, want := lines(logs(t, rt, h, allStreams)), []string{"stdout:one", "stdout:two"}; !slices.Equal(got, want) {
		t.Fatalf("logs = %q, want %q", got, want)
	}
}

func testLogOrder(t *testing.T, _ target, rt runtime.Runtime) {
	h := started(t, rt, jobSpec(t, "echo a; sleep 0.2; echo b >&2; sleep 0.2; echo c; sleep 0.2; echo d >&2"))
	wait(t, rt, h)
	all := logs(t, rt, h, allStreams)
	if got, want := lines(all), []string{"stdout:a", "stderr:b", "stdout:c", "stderr:d"}; !slices.Equal(got, want) {
		t.Fatalf("logs = %q, want %q", got, want)
	}
	if got, want := lines(logs(t, rt, h, runtime.LogOptions{Stderr: true})), []string{"stderr:b", "stderr:d"}; !slices.Equal(got, want) {
		t.Fatalf("stderr only = %q, want %q", got, want)
	}
	for i := 1; i < len(all); i++ {
		if all[i].Time.Before(all[i-1].Time) || all[i].Time.IsZero() {
			t.Fatalf("timestamps out of order: %v", all)
		}
	}
	since := logs(t, rt, h, runtime.LogOptions{Stdout: true, Stderr: true, Since: all[2].Time})
	if got, want := lines(since), []string{"stdout:c", "stderr:d"}; !slices.Equal(got, want) {
		t.Fatalf("since third line = %q, want %q", got, want)
	}
}

func testLogFollow(t *testing.T, _ target, rt runtime.Runtime) {
	h := started(t, rt, jobSpec(t, "for i in 1 2 3 4; do echo line$i; sleep 0.2; done"))
	got := lines(logs(t, rt, h, runtime.LogOptions{Stdout: true, Stderr: true, Follow: true}))
	// Follow returned by itself, so the job has ended and every line came.
	if want := []string{"stdout:line1", "stdout:line2", "stdout:line3", "stdout:line4"}; !slices.Equal(got, want) {
		t.Fatalf("followed = %q, want %q", got, want)
	}
	if e := wait(t, rt, h); e.Code != 0 {
		t.Fatalf("exit = %+v", e)
	}
}

func waitForLine(t *testing.T, rt runtime.Runtime, h runtime.Handle, line string) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, func() error {
		if slices.Contains(lines(logs(t, rt, h, allStreams)), line) {
			return nil
		}
		return fmt.Errorf("no %q in the logs yet", line)
	})
}

func testStopGraceful(t *testing.T, _ target, rt runtime.Runtime) {
	h := started(t, rt, jobSpec(t, "trap 'echo got-term; exit 0' TERM; echo ready; while true; do sleep 0.1; done"))
	waitForLine(t, rt, h, "stdout:ready")
	if err := rt.Stop(context.Background(), h, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if e := wait(t, rt, h); e.Code != 0 || e.Signal != "" {
		t.Fatalf("exit = %+v, want a clean exit 0 from the TERM trap", e)
	}
	waitForLine(t, rt, h, "stdout:got-term")
}

func testStopKill(t *testing.T, _ target, rt runtime.Runtime) {
	h := started(t, rt, jobSpec(t, "trap '' TERM; echo ready; while true; do sleep 0.1; done"))
	waitForLine(t, rt, h, "stdout:ready")
	if err := rt.Stop(context.Background(), h, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if e := wait(t, rt, h); e.Code != 137 || e.Signal != "SIGKILL" {
		t.Fatalf("exit = %+v, want 137 by SIGKILL", e)
	}
}

func testPort(t *testing.T, tg target, rt runtime.Runtime) {
	port := testutil.FreePort(t)
	spec := jobSpec(t, "mkdir -p www", "echo hello-from-job > www/index.html", fmt.Sprintf("exec busybox httpd -f -p %d -h www", port))
	spec.WorkingDir = tg.workDir(t)
	// Host 0: Docker picks the host port; processes bind the job port itself.
	spec.Ports = []api.JobPort{{Container: port}}
	h := started(t, rt, spec)
	if len(h.Ports) != 1 || h.Ports[0].Container != port || h.Ports[0].Host == 0 {
		t.Fatalf("handle ports = %+v, want %d published once with its host port", h.Ports, port)
	}
	testutil.Eventually(t, 20*time.Second, func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", h.Ports[0].Host))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if strings.TrimSpace(string(b)) != "hello-from-job" {
			return fmt.Errorf("body %q", b)
		}
		return nil
	})
}

func testHostNetwork(t *testing.T, tg target, rt runtime.Runtime) {
	port := testutil.FreePort(t)
	spec := jobSpec(t, "mkdir -p www", "echo on-host-network > www/index.html", fmt.Sprintf("exec busybox httpd -f -p 127.0.0.1:%d -h www", port))
	spec.WorkingDir, spec.HostNetwork = tg.workDir(t), true
	spec.Ports = []api.JobPort{{Container: port, Host: port}}
	started(t, rt, spec)
	testutil.Eventually(t, 20*time.Second, func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if strings.TrimSpace(string(b)) != "on-host-network" {
			return fmt.Errorf("body %q", b)
		}
		return nil
	})
}

func testOOM(t *testing.T, _ target, rt runtime.Runtime) {
	spec := jobSpec(t, `x=$(busybox head -c 400000000 /dev/zero | busybox tr '\0' a)`, "echo survived")
	spec.Memory = 48 * api.MB
	h := started(t, rt, spec)
	e := wait(t, rt, h)
	if !e.OOMKilled || e.Code == 0 {
		t.Fatalf("exit = %+v, want an OOM kill", e)
	}
	if slices.Contains(lines(logs(t, rt, h, allStreams)), "stdout:survived") {
		t.Fatal("the job survived its memory limit")
	}
}

func testUserWorkdir(t *testing.T, _ target, rt runtime.Runtime) {
	spec := jobSpec(t, "id -u", "id -g", "pwd")
	spec.User, spec.WorkingDir = "65534:65534", "/tmp"
	h := started(t, rt, spec)
	if e := wait(t, rt, h); e.Code != 0 {
		t.Fatalf("exit = %+v; logs %q", e, lines(logs(t, rt, h, allStreams)))
	}
	if got, want := lines(logs(t, rt, h, allStreams)), []string{"stdout:65534", "stdout:65534", "stdout:/tmp"}; !slices.Equal(got, want) {
		t.Fatalf("logs = %q, want %q", got, want)
	}
}

func testAdopt(t *testing.T, tg target, rt runtime.Runtime) {
	// Both jobs wait for a file, so the test decides when they end.
	dir := t.TempDir()
	spec := func(code int) api.JobSpec {
		s := jobSpec(t, "echo started", fmt.Sprintf("while [ ! -e /gate/go ]; do sleep 0.05; done; exit %d", code))
		s.Volumes = []api.JobVolume{{HostPath: dir, Path: "/gate"}}
		if tg.name == "process" {
			s.Commands[1] = strings.ReplaceAll(s.Commands[1], "/gate", dir)
			s.Volumes = nil
		}
		return s
	}
	ended := started(t, rt, spec(5))
	waitForLine(t, rt, ended, "stdout:started")
	if err := os.WriteFile(dir+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wait(t, rt, ended)
	os.Remove(dir + "/go")
	running := started(t, rt, spec(7))
	waitForLine(t, rt, running, "stdout:started")
	// A second instance stands for a restarted agent.
	rt = tg.open(t, tg.dataDir, tg.agentID)
	defer rt.Close()
	found, err := rt.Adopt(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]runtime.Found{}
	for _, f := range found {
		byID[f.Handle.JobID] = f
	}
	for id, code := range map[string]int{ended.JobID: 5, running.JobID: 7} {
		f, ok := byID[id]
		if !ok {
			t.Fatalf("Adopt did not find %s among %+v", id, found)
		}
		if f.RunName != "test-run" {
			t.Errorf("%s run name = %q", id, f.RunName)
		}
		if f.Running != (id == running.JobID) {
			t.Errorf("%s running = %v", id, f.Running)
		}
		if f.Running {
			os.WriteFile(dir+"/go", nil, 0o644)
		}
		exit := wait(t, rt, f.Handle)
		if exit.Code != code {
			t.Errorf("%s exit = %+v, want %d", id, exit, code)
		}
	}
}

func testUsage(t *testing.T, _ target, rt runtime.Runtime) {
	spec := jobSpec(t, "echo ready; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; while true; do sleep 0.1; done")
	spec.Memory = 64 * api.MB
	h := started(t, rt, spec)
	waitForLine(t, rt, h, "stdout:ready")
	testutil.Eventually(t, 20*time.Second, func() error {
		u, err := rt.Usage(context.Background(), h)
		if err != nil {
			return err
		}
		if u.MemoryBytes <= 0 || u.MemoryLimit != int64(64*api.MB) || u.CPUSeconds <= 0 {
			return fmt.Errorf("usage = %+v", u)
		}
		return nil
	})
}
