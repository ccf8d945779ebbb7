package server_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	mobyclient "github.com/moby/moby/client"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/internal/testutil/dockerimage"
)

// BenchmarkStartToRunning measures, side by side in one run, a bare Docker
// API create+start of a container and the agent's start of the same job
// over its HTTP API. On a loaded 2-core machine the engine's own time
// (hundreds of ms) varies far more than the agent's, so the agent's
// overhead is also measured directly: its start's wall time minus the time
// its own create and start calls spent in the engine (everything else —
// HTTP, validation, the image check, the hostfile, the state commit — is
// overhead).
func BenchmarkStartToRunning(b *testing.B) {
	var mu sync.Mutex
	var callStart time.Time
	var engineCreateStart time.Duration
	isCreateOrStart := func(r *http.Request) bool {
		return r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/containers/create") || strings.HasSuffix(r.URL.Path, "/start"))
	}
	h := newHost(b, "docker")
	h.dockerOpts = []mobyclient.Opt{
		mobyclient.WithHTTPRequestHook(func(r *http.Request) error {
			if isCreateOrStart(r) {
				mu.Lock()
				callStart = time.Now()
				mu.Unlock()
			}
			return nil
		}),
		mobyclient.WithHTTPResponseHook(func(resp *http.Response) {
			if resp.Request != nil && isCreateOrStart(resp.Request) {
				mu.Lock()
				engineCreateStart += time.Since(callStart)
				mu.Unlock()
			}
		}),
	}
	r := h.start(b)
	ctx := context.Background()
	cli, err := mobyclient.New(mobyclient.FromEnv, mobyclient.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	var bare, viaAgent time.Duration
	var diffs []float64 // per-iteration agent minus bare, ms
	startBare := func(name string) (string, time.Duration) {
		t0 := time.Now()
		c, err := cli.ContainerCreate(ctx, mobyclient.ContainerCreateOptions{Name: "bare-" + name,
			Config: &container.Config{Image: dockerimage.Ref, Cmd: []string{"/bin/sh", "-c", "sleep 30"}}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.ContainerStart(ctx, c.ID, mobyclient.ContainerStartOptions{}); err != nil {
			b.Fatal(err)
		}
		return c.ID, time.Since(t0)
	}
	startAgent := func(name string) time.Duration {
		t0 := time.Now()
		if _, err := r.cli.Start(ctx, api.JobSpec{ID: name, Image: dockerimage.Ref, Commands: []string{"sleep 30"}, StopDuration: time.Millisecond}); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
		var id string
		var db, da time.Duration
		// Alternate which goes first, so neither profits from a warm engine.
		if i%2 == 0 {
			id, db = startBare(name)
			da = startAgent(name)
		} else {
			da = startAgent(name)
			id, db = startBare(name)
		}
		bare += db
		viaAgent += da
		diffs = append(diffs, float64((da-db).Microseconds())/1000)

		b.StopTimer()
		cli.ContainerRemove(ctx, id, mobyclient.ContainerRemoveOptions{Force: true})
		r.cli.Stop(ctx, name)
		r.cli.Wait(ctx, name)
		r.cli.Remove(ctx, name)
		b.StartTimer()
	}
	slices.Sort(diffs)
	b.ReportMetric(float64(bare.Microseconds())/float64(b.N)/1000, "bare-ms/start")
	b.ReportMetric(float64(viaAgent.Microseconds())/float64(b.N)/1000, "agent-ms/start")
	b.ReportMetric(float64((viaAgent-bare).Microseconds())/float64(b.N)/1000, "mean-paired-diff-ms/start")
	b.ReportMetric(diffs[len(diffs)/2], "median-paired-diff-ms/start")
	mu.Lock()
	own := viaAgent - engineCreateStart
	mu.Unlock()
	b.ReportMetric(float64(own.Microseconds())/float64(b.N)/1000, "agent-own-overhead-ms/start")
}

// BenchmarkAgentProcess builds the gpud binary, starts `gpud agent` with a
// fake 8xH100 inventory and reports its idle resident memory after it
// settles, then the CPU time it spends per Prometheus scrape while one job
// runs (a scrape samples the GPUs and the job).
func BenchmarkAgentProcess(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "gpud")
	build := exec.Command("go", "build", "-o", bin, "gpud.dev/gpud")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	port := testutil.FreePort(b)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "agent", "--data-dir", filepath.Join(dir, "data"), "--listen", addr, "--token", token,
		"--runtime", "docker", "--agent-id", "bench", "--fake-gpus", "8xH100:80GB")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	testutil.Eventually(b, 20*time.Second, func() error {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	time.Sleep(2 * time.Second) // let start-up garbage be collected
	idleRSS, idleAnon := vmRSS(b, cmd.Process.Pid, "VmRSS:"), vmRSS(b, cmd.Process.Pid, "RssAnon:")

	cli := clientFor(b, "http://"+addr)
	ctx := context.Background()
	if _, err := cli.Start(ctx, api.JobSpec{ID: "bench-job", Image: dockerimage.Ref, Commands: []string{"sleep 60"}, StopDuration: time.Millisecond}); err != nil {
		b.Fatal(err)
	}
	defer func() { cli.Stop(ctx, "bench-job"); cli.Wait(ctx, "bench-job"); cli.Remove(ctx, "bench-job") }()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	cpu0 := cpuSeconds(b, cmd.Process.Pid)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	b.StopTimer()
	perScrape := (cpuSeconds(b, cmd.Process.Pid) - cpu0) / float64(b.N)
	b.ReportMetric(float64(idleRSS)/1024, "idle-rss-MB")
	b.ReportMetric(float64(idleAnon)/1024, "idle-rss-anon-MB") // the rest is the binary's own pages, shared
	b.ReportMetric(perScrape*1000, "agent-cpu-ms/scrape")
	// At Prometheus' default 15 s interval:
	b.ReportMetric(100*perScrape/15, "agent-cpu-%@15s")
}

// vmRSS reads one kB field (VmRSS:, RssAnon:) of /proc/PID/status.
func vmRSS(b *testing.B, pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	b.Fatal("no " + field)
	return 0
}

func cpuSeconds(b *testing.B, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}
