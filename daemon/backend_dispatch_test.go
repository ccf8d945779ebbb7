package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/plugins"
)

// backendServer is a server without hosts whose project main has the
// external test plugin (plugins/internal/testplugin, built from its own
// main package) added as backend "lab", offering the given GPUs as one
// offer: the only capacity its runs have.
type backendServer struct {
	*testServer
	fx       backendFixture
	stateDir string
}

func startBackendServer(t testing.TB, gpus int) backendServer {
	t.Helper()
	return startBackendServerWith(t, gpus, Options{NoLocalAgent: true})
}

// startBackendServerWith is startBackendServer with opts (a local agent
// with fake GPUs, say).
func startBackendServerWith(t testing.TB, gpus int, opts Options) backendServer {
	t.Helper()
	fx := newBackendFixture(t)
	opts.PluginDir = fx.pluginDir
	ts := startServerWith(t, opts)
	bs := backendServer{testServer: ts, fx: fx, stateDir: filepath.Join(fx.work, "engine")}
	cfg, err := json.Marshal(map[string]any{"kubeconfig": fx.kubeconfig, "state_dir": bs.stateDir, "token": "t0k",
		"offers": []api.Offer{{Instance: "a100x8", Resources: api.InstanceResources{GPUs: float64(gpus), GPUName: "A100", GPUMemory: 80 << 30, CPUs: 64, Memory: 512 << 30}, Price: 12}}})
	if err != nil {
		t.Fatal(err)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "lab", Type: "test", Config: cfg}, nil)
	t.Cleanup(func() {
		// The engine's processes outlive the plugin (as pods do): stop
		// what a failed test left running.
		if b := ts.Backends("main")["lab"]; b != nil {
			if gangs, err := b.List(context.Background()); err == nil {
				for _, g := range gangs {
					_ = b.Stop(context.Background(), g, 0)
				}
			}
		}
	})
	return bs
}

// backendJobs returns the run's jobs through the API.
func (ts *testServer) runJobs(name string) []api.Job { return ts.getRun(name).Jobs }

func (ts *testServer) logText(run string) string {
	var b strings.Builder
	for _, e := range ts.getLogs(run, "") {
		b.WriteString(e.Line + "\n")
	}
	return b.String()
}

// TestBackendRunsATaskThroughAnExternalPlugin: with no host at all, a run
// asking for one A100 is admitted onto the test backend's capacity and runs
// through the external plugin as a local process: its DSTACK_* environment
// is set, its output is readable through the logs API (the path `gpud
// logs` reads), its exit code is recorded, and the finished gang is
// deleted from the engine. The plugin is the one `gpud backend list`
// shows.
func TestBackendRunsATaskThroughAnExternalPlugin(t *testing.T) {
	ts := startBackendServer(t, 8)
	var list []api.Backend
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/backends", nil, &list)
	if len(list) != 1 || list[0].Name != "lab" || list[0].Type != "test" || list[0].State != "running" {
		t.Fatalf("backend list: %+v", list)
	}
	ts.submit("type: task\nname: b1\ncommands:\n  - echo hello from $DSTACK_RUN_NAME rank $DSTACK_NODE_RANK of $DSTACK_NODES_NUM gpus $DSTACK_GPUS_PER_NODE\n  - exit 3\nresources:\n  gpu: A100:1\n")
	r := ts.waitRun("b1", "failed", "", time.Minute)
	j := r.Jobs[0]
	if j.ExitCode == nil || *j.ExitCode != 3 || !strings.HasPrefix(j.Instance, "backend:main/lab/") {
		t.Fatalf("job: %+v (exit %v)", j, j.ExitCode)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if logs := ts.logText("b1"); !strings.Contains(logs, "hello from b1 rank 0 of 1 gpus 1") {
			return fmt.Errorf("logs: %q", logs)
		}
		return nil
	})
	testutil.Eventually(t, 30*time.Second, func() error {
		gangs, err := ts.Backends("main")["lab"].List(context.Background())
		if err != nil || len(gangs) != 0 {
			return fmt.Errorf("the finished gang is still in the engine: %v %v", gangs, err)
		}
		return nil
	})
	// A run asking for more than the backend offers waits, saying why.
	ts.submit("type: task\nname: big\ncommands: [true]\nresources:\n  gpu: A100:16\n")
	testutil.Eventually(t, 30*time.Second, func() error {
		if r := ts.getRun("big"); r.Status == "running" || r.Status == "done" {
			return fmt.Errorf("a 16-GPU run on 8 GPUs of capacity is %s", r.Status)
		}
		return nil
	})
}

// TestBackendGangIsOneStartGangAndStopsThroughTheBackend: a 2-node task
// is one gang of the engine (one StartGang, both jobs with the cluster
// environment); `gpud stop` stops it with Backend.Stop: its processes end,
// the gang is deleted and the run finishes as stopped.
func TestBackendGangIsOneStartGangAndStopsThroughTheBackend(t *testing.T) {
	ts := startBackendServer(t, 8)
	ts.submit("type: task\nname: mn\nnodes: 2\ncommands:\n  - echo rank $DSTACK_NODE_RANK of $DSTACK_NODES_NUM master $DSTACK_MASTER_NODE_IP\n  - sleep 300\nresources:\n  gpu: A100:2\n")
	ts.waitRun("mn", "running", "", time.Minute)
	b := ts.Backends("main")["lab"]
	gangs, err := b.List(context.Background())
	if err != nil || len(gangs) != 1 {
		t.Fatalf("gangs: %v %v", gangs, err)
	}
	sts, err := b.Status(context.Background(), gangs[0])
	if err != nil || len(sts) != 2 {
		t.Fatalf("one gang of two jobs: %+v %v", sts, err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		logs := ts.logText("mn")
		for _, want := range []string{"rank 0 of 2 master 127.0.0.1", "rank 1 of 2 master 127.0.0.1"} {
			if !strings.Contains(logs, want) {
				return fmt.Errorf("logs %q lack %q", logs, want)
			}
		}
		return nil
	})
	pids := jobPids(t, ts.stateDir)
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/mn/stop", api.StopRunRequest{}, nil)
	ts.waitRun("mn", "terminated", "", time.Minute)
	if gangs, err := b.List(context.Background()); err != nil || len(gangs) != 0 {
		t.Fatalf("after the stop the engine still has %v (%v)", gangs, err)
	}
	for _, pid := range pids {
		testutil.Eventually(t, 10*time.Second, func() error {
			if alive(pid) {
				return fmt.Errorf("job process %d still runs after the stop", pid)
			}
			return nil
		})
	}
}

// jobPids reads the test engine's job process ids.
func jobPids(t *testing.T, stateDir string) []int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(stateDir, "*.d", "*.pid"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no job processes in %s: %v", stateDir, err)
	}
	var out []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var pid int
		if _, err := fmt.Sscan(string(data), &pid); err != nil {
			t.Fatal(err)
		}
		out = append(out, pid)
	}
	return out
}

// alive reports whether pid runs (a zombie counts as ended).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// TestBackendRunSurvivesAPluginCrash: the plugin subprocess is killed
// while a run's job runs; the supervisor starts it again, the job (a
// process of the engine) keeps running, the run stays running and then
// finishes with its whole output and its exit code.
func TestBackendRunSurvivesAPluginCrash(t *testing.T) {
	ts := startBackendServer(t, 8)
	gate := filepath.Join(t.TempDir(), "go")
	ts.submit(fmt.Sprintf("type: task\nname: crash\ncommands:\n  - echo before\n  - while [ ! -f %s ]; do sleep 0.1; done\n  - echo after\nresources:\n  gpu: A100:1\n", gate))
	ts.waitRun("crash", "running", "", time.Minute)
	testutil.Eventually(t, 30*time.Second, func() error {
		if logs := ts.logText("crash"); !strings.Contains(logs, "before") {
			return fmt.Errorf("logs: %q", logs)
		}
		return nil
	})
	first := ts.backendOut(mustRecord(t, ts.testServer, "main/lab")).Pid
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, func() error {
		out := ts.backendOut(mustRecord(t, ts.testServer, "main/lab"))
		if out.Pid == first || out.Pid == 0 || out.State != "running" {
			return fmt.Errorf("plugin not restarted yet: %+v", out)
		}
		return nil
	})
	if r := ts.getRun("crash"); r.Status != "running" {
		t.Fatalf("after the plugin's restart the run is %s (%s)", r.Status, r.Reason)
	}
	// gpud logs -f follows the job through the backend to its end.
	followed := make(chan []api.LogEntry, 1)
	go func() { followed <- ts.getLogs("crash", "follow=true") }()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case entries := <-followed:
		if len(entries) == 0 || entries[len(entries)-1].Line != "after" {
			t.Fatalf("followed logs end with %+v", entries)
		}
	case <-time.After(time.Minute):
		t.Fatal("the followed logs did not end with the job")
	}
	r := ts.waitRun("crash", "done", "", time.Minute)
	if j := r.Jobs[0]; j.ExitCode == nil || *j.ExitCode != 0 {
		t.Fatalf("job: %+v", j)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		logs := ts.logText("crash")
		if strings.Count(logs, "before") != 1 || !strings.Contains(logs, "after") {
			return fmt.Errorf("logs (each line once): %q", logs)
		}
		return nil
	})
}

// TestBackendCapacityFollowsTheQueues: the backend's capacity is judged by
// gpud's scheduler: a queue limited to one GPU runs one of its two runs on
// a 2-GPU backend while the other waits, and a run of another queue takes
// the GPU left.
func TestBackendCapacityFollowsTheQueues(t *testing.T) {
	ts := startBackendServer(t, 2)
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/queues/apply", api.ApplyRequest{ConfigurationYAML: "type: queue\nname: qa\nlimit:\n  gpu: 1\n"}, nil)
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/queues/apply", api.ApplyRequest{ConfigurationYAML: "type: queue\nname: qb\n"}, nil)
	for _, name := range []string{"a1", "a2"} {
		ts.submit(fmt.Sprintf("type: task\nname: %s\nqueue: qa\ncommands: [sleep 300]\nresources:\n  gpu: A100:1\n", name))
	}
	ts.submit("type: task\nname: b1\nqueue: qb\ncommands: [sleep 300]\nresources:\n  gpu: A100:1\n")
	testutil.Eventually(t, time.Minute, func() error {
		st := map[string]string{}
		for _, n := range []string{"a1", "a2", "b1"} {
			st[n] = ts.getRun(n).Status
		}
		running := 0
		for _, n := range []string{"a1", "a2"} {
			if st[n] == "running" {
				running++
			}
		}
		if running != 1 || st["b1"] != "running" {
			return fmt.Errorf("statuses %v: want one of qa's runs and qb's run running", st)
		}
		return nil
	})
	// The backend now offers no GPU (its running jobs hold both); the
	// capacity adds back what gpud's own jobs hold, so it stays two GPUs
	// and nothing is counted twice: a2 still waits.
	offers, err := ts.Backends("main")["lab"].Offers(context.Background(), plugins.OfferQuery{})
	if err != nil || len(offers) != 1 || offers[0].Resources.GPUs != 0 {
		t.Fatalf("the backend's offers with both GPUs held: %+v %v", offers, err)
	}
	ts.refreshBackendCapacity(context.Background(), true)
	devices := 0
	for _, n := range ts.backendCapacityNodes() {
		devices += len(n.Devices)
	}
	if devices != 2 {
		t.Fatalf("capacity after a refresh: %d GPUs, want 2", devices)
	}
	ts.cycleNow()
	if a1, a2 := ts.getRun("a1").Status, ts.getRun("a2").Status; (a1 == "running") == (a2 == "running") {
		t.Fatalf("after the refresh: a1 is %s and a2 is %s, want one running", a1, a2)
	}
	for _, n := range []string{"a1", "a2", "b1"} {
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/"+n+"/stop", api.StopRunRequest{Abort: true}, nil)
	}
}

// TestBackendFieldsAreRefusedByName: a field a job backend cannot honour
// keeps the run off the backend, and where the backend is the only
// capacity the plan refuses it naming the field and the backend (by name
// where the field depends on the backend's features); the
// run's backends field selects the backend by type, and names no other.
func TestBackendFieldsAreRefusedByName(t *testing.T) {
	ts := startBackendServer(t, 8)
	for i, c := range []struct{ yaml, field string }{
		{"privileged: true\n", "privileged"},
		{"volumes: [/data:/data]\n", "volumes"},
		{"ports: [8080]\n", "ports"},
		{"resources:\n  shm_size: 1GB\n", "shm_size"},
		{"nodes: 1..2\n", "nodes"},
	} {
		code, e := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(fmt.Sprintf("type: task\nname: r%d\ncommands: [true]\n", i)+c.yaml), nil)
		msg := e.Message + "\n" + strings.Join(e.Errors, "\n")
		if code != http.StatusUnprocessableEntity || !strings.Contains(msg, c.field) || !strings.Contains(msg, "job backend") {
			t.Errorf("%s: %d %v", c.field, code, e)
		}
	}
	ts.submit("type: task\nname: sel\nbackends: [test]\ncommands: [true]\nresources:\n  gpu: A100:1\n")
	ts.waitRun("sel", "done", "", time.Minute)
	code, e := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply("type: task\nname: aws\nbackends: [aws]\ncommands: [true]\n"), nil)
	if msg := e.Message + "\n" + strings.Join(e.Errors, "\n"); code != http.StatusUnprocessableEntity || !strings.Contains(msg, "no aws backend is configured") {
		t.Fatalf("backends: [aws]: %d %v", code, e)
	}
	if !slices.Contains(ts.jobBackendTypes("main"), "test") || len(ts.jobBackendTypes("other")) != 0 {
		t.Fatalf("job backend types: %v", ts.jobBackendTypes("main"))
	}
}

// TestBackendRunSurvivesAServerRestart: the server stops while a run's
// job runs on the backend (the job, a process of the engine, keeps
// running); the next server on the same state re-reads the gang from the
// backend and keeps the run, which then finishes with its output copied
// once.
func TestBackendRunSurvivesAServerRestart(t *testing.T) {
	ts := startBackendServer(t, 8)
	gate := filepath.Join(t.TempDir(), "go")
	ts.submit(fmt.Sprintf("type: task\nname: rs\ncommands:\n  - echo before\n  - while [ ! -f %s ]; do sleep 0.1; done\n  - echo after\nresources:\n  gpu: A100:1\n", gate))
	ts.waitRun("rs", "running", "", time.Minute)
	testutil.Eventually(t, 30*time.Second, func() error {
		if logs := ts.logText("rs"); !strings.Contains(logs, "before") {
			return fmt.Errorf("logs: %q", logs)
		}
		return nil
	})
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	ts2 := startServerWith(t, Options{DataDir: ts.opts.DataDir, NoLocalAgent: true, PluginDir: ts.fx.pluginDir})
	ts2.admin = ts.admin
	if r := ts2.getRun("rs"); r.Status != "running" {
		t.Fatalf("after the restart the run is %s (%s)", r.Status, r.Reason)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := ts2.waitRun("rs", "done", "", time.Minute)
	if j := r.Jobs[0]; j.ExitCode == nil || *j.ExitCode != 0 {
		t.Fatalf("job: %+v", j)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		logs := ts2.logText("rs")
		if strings.Count(logs, "before") != 1 || !strings.Contains(logs, "after") {
			return fmt.Errorf("logs (each line once): %q", logs)
		}
		return nil
	})
}

// TestBackendCapacityServesOnlyItsProject attacks the capacity: a run of
// another project, asking for exactly what main's backend offers and
// naming it in backends, is refused at plan time (that project has no
// such backend) and, without backends, waits: main's backend never runs
// it, so its env and secrets never reach main's engine.
func TestBackendCapacityServesOnlyItsProject(t *testing.T) {
	ts := startBackendServer(t, 8)
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	apply := func(yaml string) (int, string) {
		code, e := ts.call(ts.admin, "POST", "/api/v1/projects/other/runs/apply", yamlApply(yaml), nil)
		return code, e.Message + "\n" + strings.Join(e.Errors, "\n")
	}
	if code, msg := apply("type: task\nname: steal\nbackends: [test]\ncommands: [echo $SECRET]\nresources:\n  gpu: A100:1\n"); code != http.StatusUnprocessableEntity || !strings.Contains(msg, "no test backend is configured in project \"other\"") {
		t.Fatalf("another project naming main's backend: %d %s", code, msg)
	}
	if code, msg := apply("type: task\nname: wait\ncommands: [echo hi]\nresources:\n  gpu: A100:1\n"); code != http.StatusCreated {
		t.Fatalf("apply: %d %s", code, msg)
	}
	var r api.Run
	testutil.Eventually(t, 30*time.Second, func() error {
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/other/runs/wait", nil, &r)
		if len(r.Jobs) == 0 || r.Jobs[0].Status != "submitted" || !strings.Contains(r.Jobs[0].Reason+r.Reason, "project") {
			return fmt.Errorf("run of other: %s (%s), jobs %+v", r.Status, r.Reason, r.Jobs)
		}
		return nil
	})
	if gangs, err := ts.Backends("main")["lab"].List(context.Background()); err != nil || len(gangs) != 0 {
		t.Fatalf("main's engine got %v (%v)", gangs, err)
	}
}

// TestBackendIsUsedWhereNoHostHasTheResources: with the server's own host
// (two fake A100s, the process runtime) and the backend (eight A100s), a
// run asking for one GPU runs on the host, and one asking for four, which
// no host has, runs through the backend.
func TestBackendIsUsedWhereNoHostHasTheResources(t *testing.T) {
	ts := startBackendServerWith(t, 8, Options{FakeGPUs: "2xA100:80GB", Runtime: "process"})
	ts.submit("type: task\nname: small\ncommands: [sleep 300]\nresources:\n  gpu: A100:1\n")
	ts.submit("type: task\nname: large\ncommands: [sleep 300]\nresources:\n  gpu: A100:4\n")
	for name, onBackend := range map[string]bool{"small": false, "large": true} {
		r := ts.waitRun(name, "running", "", time.Minute)
		if got := strings.HasPrefix(r.Jobs[0].Instance, "backend:"); got != onBackend {
			t.Errorf("%s runs on %s", name, r.Jobs[0].Instance)
		}
	}
	for _, n := range []string{"small", "large"} {
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/"+n+"/stop", api.StopRunRequest{Abort: true}, nil)
	}
}

// BenchmarkBackendGangToRunning measures a 16-node task through the server
// and the external test plugin, from submit to the run running: a
// scheduling cycle, one StartGang of 16 local processes and the first
// status poll. Each run is stopped (outside the timer) before the next.
func BenchmarkBackendGangToRunning(b *testing.B) {
	ts := startBackendServer(b, 16)
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("g%d", i)
		start := time.Now()
		ts.submit("type: task\nname: " + name + "\nnodes: 16\ncommands: [sleep 300]\nresources:\n  gpu: A100:1\n")
		ts.waitRun(name, "running", "", time.Minute)
		total += time.Since(start)
		b.StopTimer()
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/"+name+"/stop", api.StopRunRequest{Abort: true}, nil)
		ts.waitRun(name, "terminated", "", time.Minute)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/gang")
}
