package daemon

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil/dockerimage"
	"gpud.dev/gpud/store"
)

// BenchmarkSubmitToRunning measures the time from POST runs/apply to the
// job's status running on the local agent (fake GPUs), woken only by the
// change feed: with the process runtime, and with Docker and the image
// already present. Reports p50 and p95 in ms.
func BenchmarkSubmitToRunning(b *testing.B) {
	cases := []struct {
		name  string
		start func(testing.TB) *testServer
		extra string
	}{
		{"process", func(t testing.TB) *testServer { return startServer(t, "8xH100:80GB") }, ""},
		{"docker", startDockerServer, "image: " + dockerimage.Ref + "\n"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ts := c.start(b)
			var lat []time.Duration
			b.ResetTimer()
			for i := range b.N {
				sub := ts.store.Subscribe("", store.KindJob)
				start := time.Now()
				var run api.Run
				ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask(fmt.Sprintf("r%d", i), "default", 0)+c.extra), &run)
				for ch := range sub.C {
					if ch.Record.Run == run.ID && ch.Record.Status == store.JobRunning {
						break
					}
				}
				lat = append(lat, time.Since(start))
				sub.Close()
				ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/"+run.Name+"/stop", api.StopRunRequest{Abort: true}, nil)
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
		})
	}
}

// BenchmarkRunsApply measures POST runs/apply of runs that wait in their
// queue (no GPU on the host), so only submission is timed.
func BenchmarkRunsApply(b *testing.B) {
	ts := startServer(b, "")
	b.ResetTimer()
	for i := range b.N {
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask(fmt.Sprintf("a%d", i), "default", 1)), nil)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "applies/s")
}

// BenchmarkRunsList measures GET runs with 200 stored runs.
func BenchmarkRunsList(b *testing.B) {
	ts := startServer(b, "")
	for i := range 200 {
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask(fmt.Sprintf("l%d", i), "default", 1)), nil)
	}
	b.ResetTimer()
	for range b.N {
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs", nil, nil)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lists/s")
}

// BenchmarkHeartbeat1000Agents: 1,000 simulated agents (8 fake H100 each)
// heartbeat every 5 s through POST /api/v1/agents/heartbeat. Each
// iteration is one 5 s interval; reported are the process's CPU time per
// wall second (server and the simulated agents' HTTP clients together,
// so an upper bound for the server) and its RSS.
func BenchmarkHeartbeat1000Agents(b *testing.B) {
	const agents, every = 1000, 5 * time.Second
	ts := startServer(b, "8xH100:80GB")
	inst := ts.store.Instances().List()[0]
	st, err := instanceSpecOf(inst)
	if err != nil {
		b.Fatal(err)
	}
	host := st.Host
	beat := func(i int) {
		h := host
		h.Hostname = fmt.Sprintf("sim-%04d", i)
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/agents/heartbeat", api.Heartbeat{Instance: h.Hostname, Host: h}, nil)
	}
	for i := range agents { // registration, not measured
		beat(i)
	}
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		var wg sync.WaitGroup
		for i := range agents {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * every / agents) // spread over the interval
				beat(i)
			})
		}
		wg.Wait()
		time.Sleep(time.Until(start.Add(every)))
		start = start.Add(every)
	}
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) - syscall.TimevalToNsec(ru0.Utime) + syscall.TimevalToNsec(ru1.Stime) - syscall.TimevalToNsec(ru0.Stime))
	b.ReportMetric(100*cpu.Seconds()/b.Elapsed().Seconds(), "cpu-%")
	b.ReportMetric(float64(rssBytes())/(1<<20), "rss-MiB")
	b.ReportMetric(float64(agents)/every.Seconds(), "heartbeats/s")
}

// rssBytes reads this process's resident set size.
func rssBytes() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
