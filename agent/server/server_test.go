package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mobyclient "github.com/moby/moby/client"
	"github.com/rs/zerolog"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/agent/gpu"
	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/agent/runtime/docker"
	"gpud.dev/gpud/agent/runtime/process"
	"gpud.dev/gpud/agent/server"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/internal/testutil/dockerimage"
)

func TestMain(m *testing.M) { dockerimage.Main(m) }

const token = "test-token"

// host is one agent data dir with a runtime kind; start brings up an
// agent process-equivalent (runtime, agent, HTTP server) on it.
type host struct {
	kind    string
	dataDir string
	agentID string
	// dockerOpts are extra engine client options (benchmarks time calls).
	dockerOpts []mobyclient.Opt
	// retention and recordRetention are the agent's (zero: its defaults).
	retention, recordRetention time.Duration
	// log is the agent's logger (nil: none).
	log *zerolog.Logger
}

type running struct {
	agent *agent.Agent
	rt    runtime.Runtime
	srv   *httptest.Server
	cli   *client.Client
}

// runtime opens the host's runtime of its kind, as an agent would.
func (h host) runtime(t testing.TB) (runtime.Runtime, api.DockerInfo) {
	t.Helper()
	if h.kind == "docker" {
		d, err := docker.New(context.Background(), docker.Config{DataDir: h.dataDir + "/docker", AgentID: h.agentID, ClientOptions: h.dockerOpts})
		if err != nil {
			t.Fatal(err)
		}
		v, apiv := d.EngineVersion()
		return d, api.DockerInfo{Usable: true, Version: v, APIVersion: apiv}
	}
	p, err := process.New(process.Config{DataDir: h.dataDir + "/jobs", AgentID: h.agentID, ShimCommand: dockerimage.ShimCommand()})
	if err != nil {
		t.Fatal(err)
	}
	return p, api.DockerInfo{}
}

// waitEnded waits, with no agent running, until the host's runtime
// reports job id as ended.
func (h host) waitEnded(t testing.TB, id string) {
	t.Helper()
	rt, _ := h.runtime(t)
	defer rt.Close()
	testutil.Eventually(t, 20*time.Second, func() error {
		found, err := rt.Adopt(context.Background())
		if err != nil {
			return err
		}
		for _, f := range found {
			if f.Handle.JobID == id {
				if f.Running {
					return fmt.Errorf("job %s still runs", id)
				}
				return nil
			}
		}
		return fmt.Errorf("the runtime does not know job %s: %+v", id, found)
	})
}

func (h host) start(t testing.TB) *running {
	t.Helper()
	ctx := context.Background()
	rt, dockerInfo := h.runtime(t)
	gpus, err := gpu.Open(ctx, gpu.Options{Fake: "8xH100:80GB"})
	if err != nil {
		t.Fatal(err)
	}
	// Jobs may mount any host path but the data dir (the gated jobs
	// mount a temporary directory), as in the embedded laptop mode.
	volumes, err := agent.NewVolumePolicy([]string{"/"}, []string{h.dataDir})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(ctx, agent.Config{DataDir: h.dataDir, Runtime: rt, GPUs: gpus, Docker: dockerInfo, Volumes: volumes,
		JobRetention: h.retention, RecordRetention: h.recordRetention, Logger: h.logger()})
	if err != nil {
		t.Fatal(err)
	}
	handler, err := server.New(a, token, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	cli, err := client.New(srv.URL, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &running{agent: a, rt: rt, srv: srv, cli: cli}
	t.Cleanup(func() { r.stop(); gpus.Close() })
	return r
}

func (h host) logger() zerolog.Logger {
	if h.log != nil {
		return *h.log
	}
	return zerolog.Nop()
}

// stop takes the agent down the way a crash or upgrade would: jobs keep
// running. It is idempotent.
func (r *running) stop() {
	if r.srv == nil {
		return
	}
	r.srv.Close()
	r.agent.Close()
	r.rt.Close()
	r.srv = nil
}

func newHost(t testing.TB, kind string) host {
	return host{kind: kind, dataDir: t.TempDir(), agentID: fmt.Sprintf("a%d", time.Now().UnixNano())}
}

func spec(t *testing.T, id string, commands ...string) api.JobSpec {
	return api.JobSpec{ID: id, RunName: "run-" + id, Image: dockerimage.Ref, Commands: commands, StopDuration: 2 * time.Second}
}

func removeAll(t *testing.T, c *client.Client) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		jobs, _ := c.List(ctx)
		for _, j := range jobs {
			c.Stop(ctx, j.ID)
			c.Wait(ctx, j.ID)
			c.Remove(ctx, j.ID)
		}
	})
}

var kinds = []string{"docker", "process"}

func clientFor(t testing.TB, addr string) *client.Client {
	c, err := client.New(addr, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAPIRefusesRequestsWithoutTheToken(t *testing.T) {
	r := newHost(t, "process").start(t)
	for _, path := range []string{"/api/v1/host", "/api/v1/jobs", "/metrics"} {
		resp, err := http.Get(r.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without token: %d, want 401", path, resp.StatusCode)
		}
	}
	bad, _ := client.New(r.srv.URL, "wrong", nil)
	if _, err := bad.List(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong token: %v, want 401", err)
	}
}

func TestHostInfoReportsMachineAndFakeAccelerators(t *testing.T) {
	r := newHost(t, "docker").start(t)
	h, err := r.cli.Host(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if h.CPUs < 1 || h.Memory <= 0 || h.Disk <= 0 || h.Arch == "" || h.OS == "" || h.Hostname == "" {
		t.Errorf("host info incomplete: %+v", h)
	}
	if !h.Docker.Usable || !strings.HasPrefix(h.Docker.APIVersion, "1.") || h.Runtime != "docker" {
		t.Errorf("docker = %+v runtime %q", h.Docker, h.Runtime)
	}
	if n := len(h.Accelerators.Devices); n != 8 || h.Accelerators.Source != "fake" {
		t.Fatalf("accelerators = %d from %q, want 8 fake", n, h.Accelerators.Source)
	}
	if d := h.Accelerators.Devices[0]; d.MemoryTotal != 80<<30 || !strings.Contains(d.Name, "H100") {
		t.Errorf("device 0 = %+v", d)
	}
}

func TestJobLifecycleOverTheAPI(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			r := newHost(t, kind).start(t)
			removeAll(t, r.cli)
			ctx := context.Background()
			s := spec(t, "life", "echo hello", "echo oops >&2", "trap 'echo bye; exit 0' TERM; echo ready; while true; do sleep 0.1; done")
			s.GPUs.Devices = []string{"2", "3"}
			st, err := r.cli.Start(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if st.State != api.JobRunning || st.Runtime != kind || st.Handle == "" {
				t.Fatalf("started = %+v", st)
			}
			if _, err := r.cli.Start(ctx, s); err == nil {
				t.Fatal("a second start of the same id succeeded")
			}
			// Follow logs in the background while the job runs.
			followed := make(chan []string, 1)
			go func() {
				var got []string
				r.cli.Logs(ctx, "life", client.LogOptions{Follow: true}, func(e api.JobLogEntry) error {
					got = append(got, string(e.Stream)+":"+e.Line)
					return nil
				})
				followed <- got
			}()
			m, err := r.cli.Metrics(ctx, "life")
			if err != nil {
				t.Fatal(err)
			}
			if m.MemoryBytes <= 0 || len(m.GPUs) != 2 || m.GPUs[0].Index != 2 {
				t.Errorf("metrics = %+v, want memory and GPUs 2,3", m)
			}
			prom := get(t, r, "/metrics")
			for _, want := range []string{`gpud_gpu_utilization_percent{gpu="7"`, `gpud_gpu_power_watts{`, `gpud_job_cpu_seconds_total{job="life",run="run-life"}`, `gpud_job_gpu_utilization_percent{gpu="3",job="life"`, `gpud_agent_jobs{state="running"} 1`} {
				if !strings.Contains(prom, want) {
					t.Errorf("/metrics lacks %s", want)
				}
			}
			testutil.Eventually(t, 20*time.Second, func() error {
				ready := false
				r.cli.Logs(ctx, "life", client.LogOptions{}, func(e api.JobLogEntry) error { ready = ready || e.Line == "ready"; return nil })
				if !ready {
					return fmt.Errorf("the TERM trap is not set yet")
				}
				return nil
			})
			if st, err := r.cli.Stop(ctx, "life"); err != nil || (st.State != api.JobTerminating && !st.State.Finished()) {
				t.Fatalf("stop = %+v, %v", st, err)
			}
			st, err = r.cli.Wait(ctx, "life")
			if err != nil {
				t.Fatal(err)
			}
			if st.State != api.JobTerminated || st.Reason != api.ExitStopped || st.ExitCode != 0 {
				t.Fatalf("after stop = %+v", st)
			}
			// Lines keep their order within each stream (across streams only
			// as far as the two pipes are read in time). The process runtime's
			// shell may add "Terminated" on stderr for its killed sleep.
			var stdout, stderr []string
			for _, l := range <-followed {
				if s, ok := strings.CutPrefix(l, "stdout:"); ok {
					stdout = append(stdout, s)
				} else if l != "stderr:Terminated" {
					stderr = append(stderr, strings.TrimPrefix(l, "stderr:"))
				}
			}
			if want := []string{"hello", "ready", "bye"}; !slices.Equal(stdout, want) {
				t.Fatalf("followed stdout = %q, want %q", stdout, want)
			}
			if want := []string{"oops"}; !slices.Equal(stderr, want) {
				t.Fatalf("followed stderr = %q, want %q", stderr, want)
			}
			if err := r.cli.Remove(ctx, "life"); err != nil {
				t.Fatal(err)
			}
			if _, err := r.cli.Get(ctx, "life"); !client.IsNotFound(err) {
				t.Fatalf("after remove: %v, want not found", err)
			}
		})
	}
}

func TestExitReasons(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			r := newHost(t, kind).start(t)
			removeAll(t, r.cli)
			oom := spec(t, "oom", `x=$(busybox head -c 400000000 /dev/zero | busybox tr '\0' a)`)
			oom.Memory = 48 * api.MB
			cases := []struct {
				name   string
				spec   api.JobSpec
				state  api.JobState
				reason api.ExitReason
				code   int
			}{
				{"clean exit is done", spec(t, "ok", "true"), api.JobDone, api.ExitExited, 0},
				{"non-zero exit is failed", spec(t, "bad", "exit 9"), api.JobFailed, api.ExitExited, 9},
				{"a signal nobody on the agent sent is signaled", spec(t, "sig", "kill -KILL $$"), api.JobFailed, api.ExitSignaled, 137},
				{"over the memory limit is oom_killed", oom, api.JobFailed, api.ExitOOMKilled, 137},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					ctx := context.Background()
					if _, err := r.cli.Start(ctx, c.spec); err != nil {
						t.Fatal(err)
					}
					st, err := r.cli.Wait(ctx, c.spec.ID)
					if err != nil {
						t.Fatal(err)
					}
					if st.State != c.state || st.Reason != c.reason || st.ExitCode != c.code {
						t.Fatalf("status = %s/%s/%d, want %s/%s/%d", st.State, st.Reason, st.ExitCode, c.state, c.reason, c.code)
					}
				})
			}
		})
	}
}

func TestRestartReadoptsRunningJobsAndReportsJobsThatEnded(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			h := newHost(t, kind)
			gates := t.TempDir()
			gated := func(id string, code int) api.JobSpec {
				s := spec(t, id, "echo started-"+id, fmt.Sprintf("while [ ! -e /gates/%s ]; do sleep 0.05; done; echo done-%s; exit %d", id, id, code))
				if kind == "docker" {
					s.Volumes = []api.JobVolume{{HostPath: gates, Path: "/gates"}}
				} else {
					s.Commands[1] = strings.ReplaceAll(s.Commands[1], "/gates", gates)
				}
				return s
			}
			ctx := context.Background()
			first := h.start(t)
			for id, code := range map[string]int{"survivor": 3, "ended": 4} {
				if _, err := first.cli.Start(ctx, gated(id, code)); err != nil {
					t.Fatal(err)
				}
			}
			first.stop() // the agent goes down; its jobs keep running
			if err := os.WriteFile(gates+"/ended", nil, 0o644); err != nil {
				t.Fatal(err)
			}
			// "ended" ends while no agent runs.
			h.waitEnded(t, "ended")

			second := h.start(t)
			removeAll(t, second.cli)
			st, err := second.cli.Wait(ctx, "ended")
			if err != nil {
				t.Fatal(err)
			}
			if st.State != api.JobFailed || st.ExitCode != 4 || !st.EndedWhileAgentDown {
				t.Fatalf("ended = %+v, want failed with 4 while the agent was down", st)
			}
			st, err = second.cli.Get(ctx, "survivor")
			if err != nil || st.State != api.JobRunning {
				t.Fatalf("survivor = %+v, %v; want running after the restart", st, err)
			}
			os.WriteFile(gates+"/survivor", nil, 0o644)
			st, err = second.cli.Wait(ctx, "survivor")
			if err != nil || st.ExitCode != 3 || st.EndedWhileAgentDown {
				t.Fatalf("survivor = %+v, %v; want exit 3 seen live", st, err)
			}
			var lines []string
			second.cli.Logs(ctx, "survivor", client.LogOptions{}, func(e api.JobLogEntry) error { lines = append(lines, e.Line); return nil })
			if want := []string{"started-survivor", "done-survivor"}; !slices.Equal(lines, want) {
				t.Fatalf("logs across the restart = %q, want %q", lines, want)
			}
		})
	}
}

func get(t *testing.T, r *running, path string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

func TestRestartDuringStopFinishesTheStop(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			h := newHost(t, kind)
			ctx := context.Background()
			first := h.start(t)
			s := spec(t, "stubborn", "trap '' TERM; echo ready; while true; do sleep 0.1; done")
			s.StopDuration = time.Second
			if _, err := first.cli.Start(ctx, s); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 20*time.Second, func() error {
				ready := false
				first.cli.Logs(ctx, "stubborn", client.LogOptions{}, func(e api.JobLogEntry) error { ready = ready || e.Line == "ready"; return nil })
				if !ready {
					return fmt.Errorf("not ready")
				}
				return nil
			})
			if _, err := first.cli.Stop(ctx, "stubborn"); err != nil {
				t.Fatal(err)
			}
			first.stop() // down within the grace period, before SIGKILL

			second := h.start(t)
			removeAll(t, second.cli)
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			st, err := second.cli.Wait(wctx, "stubborn")
			if err != nil {
				t.Fatalf("the job outlived a stop interrupted by a restart: %v", err)
			}
			if st.State != api.JobTerminated || st.Reason != api.ExitStopped || st.Signal != "SIGKILL" {
				t.Fatalf("status = %+v, want terminated by SIGKILL", st)
			}
		})
	}
}

func TestAPIOverAUnixSocket(t *testing.T) {
	r := newHost(t, "process").start(t)
	sock := t.TempDir() + "/agent.sock"
	l, err := server.Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, l, r.srv.Config.Handler) }()
	defer func() { cancel(); <-done }()
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode = %v, %v; want 0600", fi.Mode(), err)
	}
	c, err := client.New("unix://"+sock, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Host(ctx)
	if err != nil || h.Runtime != "process" {
		t.Fatalf("host over unix socket = %+v, %v", h, err)
	}
}

// TestAJobWhoseExitWasNotRecordedIsLost removes what held the exit status:
// a container deleted while the agent was down, or a shim killed while
// its job ran.
func TestAJobWhoseExitWasNotRecordedIsLost(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			h := newHost(t, kind)
			r := h.start(t)
			ctx := context.Background()
			st, err := r.cli.Start(ctx, spec(t, "doomed", "sleep 2"))
			if err != nil {
				t.Fatal(err)
			}
			whileDown := kind == "docker"
			if whileDown {
				r.stop()
				cli, err := mobyclient.New(mobyclient.FromEnv, mobyclient.WithAPIVersionNegotiation())
				if err != nil {
					t.Fatal(err)
				}
				defer cli.Close()
				if _, err := cli.ContainerRemove(ctx, st.Handle, mobyclient.ContainerRemoveOptions{Force: true}); err != nil {
					t.Fatal(err)
				}
				r = h.start(t)
			} else {
				pid, err := strconv.Atoi(strings.Split(st.Handle, ":")[0])
				if err != nil {
					t.Fatal(err)
				}
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil { // the shim, not the job
					t.Fatal(err)
				}
			}
			removeAll(t, r.cli)
			st, err = r.cli.Wait(ctx, "doomed")
			if err != nil {
				t.Fatal(err)
			}
			if st.State != api.JobFailed || st.Reason != api.ExitLost || st.EndedWhileAgentDown != whileDown {
				t.Fatalf("status = %+v, want failed/lost", st)
			}
		})
	}
}
