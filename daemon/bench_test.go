package daemon

import (
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// BenchmarkSubmitToRunning measures the time from POST runs/apply to the
// job's status running on the local agent (process runtime, fake GPUs),
// woken only by the change feed. Reports p50 and p95 in ms.
func BenchmarkSubmitToRunning(b *testing.B) {
	ts := startServer(b, "8xH100:80GB")
	var lat []time.Duration
	b.ResetTimer()
	for i := range b.N {
		sub := ts.store.Subscribe("", store.KindJob)
		start := time.Now()
		var run api.Run
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask(fmt.Sprintf("r%d", i), "default", 0)), &run)
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
