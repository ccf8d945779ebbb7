package daemon

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// TestServiceAutoscalesOnRequestRate: a service with `replicas: 1..2`
// and `scaling` goes to 2 replicas once the gateway's rate (15 requests/s
// against a target of 10 per replica) held for scale_up_delay, and back
// to 1 after scale_down_delay without load; each decision is an event of
// the run with the measured rate, and the count is kept in the run.
func TestServiceAutoscalesOnRequestRate(t *testing.T) {
	ts := startServer(t, "")
	rates := &fakeRates{}
	ts.setRequestRates(rates)
	port := freeLoopbackPort(t)
	ts.submit(replicaService(echoBinary(t), "auto", port, "v1",
		"replicas: 1..2\nscaling: {metric: rps, target: 10, window: 1s, scale_up_delay: 1s, scale_down_delay: 1s}\n"))
	ts.waitRun("auto", "running", "", 60*time.Second)
	ts.waitReplicas("auto", 1, 30*time.Second)

	rates.set("main/auto", 15)
	ts.waitReplicas("auto", 2, 60*time.Second)
	up := ts.waitEvent("auto", 10*time.Second, "autoscaled from 1 to 2 replicas", "requests/s over 1s", "target 10")
	if !strings.Contains(up.Reason, "15.00 requests/s") {
		t.Errorf("the scale-up event does not carry the measured rate: %q", up.Reason)
	}
	if b := ts.body200(t, "/proxy/services/main/auto/", 30*time.Second); !strings.Contains(b, "version=v1") {
		t.Errorf("the service answered %q", b)
	}
	if r := ts.getRun("auto"); r.Status != "running" {
		t.Errorf("the run is %s (%s) while it scales, want running", r.Status, r.Reason)
	}

	rates.set("main/auto", 0)
	ts.waitReplicas("auto", 1, 60*time.Second)
	down := ts.waitEvent("auto", 10*time.Second, "autoscaled from 2 to 1 replicas")
	if !strings.Contains(down.Reason, "0.00 requests/s") {
		t.Errorf("the scale-down event does not carry the measured rate: %q", down.Reason)
	}
	run, err := ts.store.Runs().Get(ts.getRun("auto").ID)
	if err != nil {
		t.Fatal(err)
	}
	st, err := runSpecOf(run)
	if err != nil {
		t.Fatal(err)
	}
	if st.Service == nil || st.Service.Replicas != 1 || !st.Service.Scaled {
		t.Errorf("the run keeps the replica count %+v, want 1 (scaled)", st.Service)
	}
}

// TestServiceScalesToZeroAndWakesOnRequest: a service with `replicas:
// 0..1` goes to zero replicas after scale_down_delay without requests
// and stays running; a request through the proxy then waits while one
// replica starts (scale from zero), and is answered by it.
func TestServiceScalesToZeroAndWakesOnRequest(t *testing.T) {
	ts := startServer(t, "")
	port := freeLoopbackPort(t)
	// Its probe tells when the woken replica listens.
	ts.submit(replicaService(echoBinary(t), "zero", port, "v1",
		"replicas: 0..1\nscaling: {metric: rps, target: 10, window: 1s, scale_up_delay: 1h, scale_down_delay: 1s}\n"+
			"probes:\n  - {url: /health, method: post, headers: [{name: X-Probe, value: gpud}], body: ping, interval: 1s}\n"))
	ts.waitRun("zero", "running", "", 60*time.Second)
	ts.waitEvent("zero", 60*time.Second, "scaled to zero", "0.00 requests/s over 1s")
	ts.waitReplicas("zero", 0, 30*time.Second)
	if r := ts.getRun("zero"); r.Status != "running" || !strings.Contains(r.Reason, "scaled to zero") {
		t.Errorf("a service scaled to zero is %s (%s), want running, saying it scaled to zero", r.Status, r.Reason)
	}

	// One request wakes it and gets its answer (the cold-start hold).
	code, body := ts.proxyGet("/proxy/services/main/zero/", "")
	if code != 200 || !strings.Contains(body, "version=v1") {
		t.Fatalf("a request to the service scaled to zero: %d %q, want the new replica's answer", code, body)
	}
	ts.waitEvent("zero", 10*time.Second, "scaled from zero to 1 replica")
	ts.waitReplicas("zero", 1, 10*time.Second)
}

// TestScaleFromZeroAsksForOneReplica: the gateway's seam asks for one
// replica of a service scaled to zero, at once, and only one however
// often it is called; a service with a fixed count is left alone.
func TestScaleFromZeroAsksForOneReplica(t *testing.T) {
	ts := startServer(t, "")
	port := freeLoopbackPort(t)
	ts.submit(replicaService(echoBinary(t), "seam", port, "v1",
		"replicas: 0..2\nscaling: {metric: rps, target: 10, window: 1s, scale_up_delay: 1h, scale_down_delay: 1s}\n"))
	ts.waitEvent("seam", 60*time.Second, "scaled to zero")
	ts.waitReplicas("seam", 0, 30*time.Second)
	for range 3 {
		if err := ts.scaleFromZero(t.Context(), "main", "seam"); err != nil {
			t.Fatal(err)
		}
	}
	ts.waitReplicas("seam", 1, 30*time.Second)
	if err := ts.scaleFromZero(t.Context(), "main", "nosuch"); err == nil {
		t.Error("scaleFromZero of an unknown run did not fail")
	}
}

func TestDesiredReplicas(t *testing.T) {
	for _, c := range []struct {
		rate, target float64
		lo, hi, want int
	}{
		{0, 10, 0, 3, 0}, {0, 10, 1, 3, 1}, {10, 10, 0, 3, 1}, {10.5, 10, 0, 3, 2},
		{15, 10, 1, 2, 2}, {100, 10, 1, 3, 3}, {0.01, 10, 0, 3, 1},
	} {
		if got := desiredReplicas(c.rate, c.target, c.lo, c.hi); got != c.want {
			t.Errorf("desiredReplicas(%g, %g, %d, %d) = %d, want %d", c.rate, c.target, c.lo, c.hi, got, c.want)
		}
	}
}

// TestServiceScalesUpUnderLoad: real requests through the server's
// proxy raise the measured rate past the target, and the service gets a
// second replica; once the load stops, it goes back to one after
// scale_down_delay. The events carry the rates. The load is bounded in
// count and time, and stops once the replica is asked for.
func TestServiceScalesUpUnderLoad(t *testing.T) {
	ts := startServer(t, "")
	port := freeLoopbackPort(t)
	ts.submit(replicaService(echoBinary(t), "load", port, "v1",
		"replicas: 1..2\nscaling: {metric: rps, target: 10, window: 1s, scale_up_delay: 1s, scale_down_delay: 2s}\n"))
	ts.waitRun("load", "running", "", 60*time.Second)
	ts.body200(t, "/proxy/services/main/load/", 30*time.Second)

	client := &http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	sent, scaled := 0, false
	for sent < 5000 && time.Now().Before(deadline) && !scaled {
		resp, err := client.Get(ts.URL() + "/proxy/services/main/load/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", sent, resp.StatusCode)
		}
		sent++
		if sent%100 == 0 {
			scaled = ts.activeReplicas("load")[store.JobSubmitted]+ts.activeReplicas("load")[store.JobRunning] >= 2
		}
	}
	up := ts.waitEvent("load", 60*time.Second, "autoscaled from 1 to 2 replicas")
	if rate := eventRate(t, up); rate <= 10 {
		t.Errorf("the scale-up event's rate: %q, want above the target 10", up.Reason)
	}
	// The load stopped: the rate falls, and after scale_down_delay the
	// second replica goes.
	down := ts.waitEvent("load", 60*time.Second, "autoscaled from 2 to 1 replicas")
	if rate := eventRate(t, down); rate > 10 {
		t.Errorf("the scale-down event's rate: %q, want at most the target 10", down.Reason)
	}
	ts.waitReplicas("load", 1, 60*time.Second)
	t.Logf("%d requests; %s; %s", sent, up.Reason, down.Reason)
}

// eventRate reads the rate of a scaling event ("...: 12.50 requests/s ...").
func eventRate(t *testing.T, e api.Event) float64 {
	t.Helper()
	var rate float64
	i := strings.Index(e.Reason, ": ")
	if i < 0 {
		t.Fatalf("event %q has no rate", e.Reason)
	}
	if _, err := fmt.Sscanf(e.Reason[i+2:], "%f requests/s", &rate); err != nil {
		t.Fatalf("event %q: %v", e.Reason, err)
	}
	return rate
}

// TestAutoscaledServiceReplacesAReplicaThatEnds: a replica of an
// autoscaled service that exits on its own is replaced after
// scale_up_delay, by a replica with the next number.
func TestAutoscaledServiceReplacesAReplicaThatEnds(t *testing.T) {
	ts := startServer(t, "")
	rates := &fakeRates{}
	ts.setRequestRates(rates)
	rates.set("main/flaky", 15)
	port := freeLoopbackPort(t)
	// Replica 1 exits at once; the others serve.
	ts.submit(fmt.Sprintf(`type: service
name: flaky
port: %[1]d
auth: false
commands:
  - if [ "$GPUD_REPLICA_NUM" = 1 ]; then exit 1; fi; exec %[2]s %[3]s 127.0.0.1:%[1]d v1
replicas: 1..2
scaling: {metric: rps, target: 10, window: 1s, scale_up_delay: 1s, scale_down_delay: 1h}
resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
`, port, echoBinary(t), replicaServeArg))
	ts.waitEvent("flaky", 60*time.Second, "autoscaled from 1 to 2 replicas")
	testutil.Eventually(t, 60*time.Second, func() error {
		byReplica := map[int]string{}
		for _, j := range ts.getRun("flaky").Jobs {
			byReplica[j.ReplicaNum] = j.Status
		}
		if byReplica[0] != "running" || byReplica[1] != "failed" || byReplica[2] != "running" || len(byReplica) != 3 {
			return fmt.Errorf("replicas by number: %v, want 0 running, 1 failed and replaced by 2 running", byReplica)
		}
		return nil
	})
	if r := ts.getRun("flaky"); r.Status != "running" {
		t.Errorf("the run is %s (%s), want running", r.Status, r.Reason)
	}
}

// TestAutoscaledCountSurvivesAServerRestart: the replicas an autoscaler
// started, its count and the time of its last scaling are kept in the
// store: after a server restart the service still has them, and the new
// server's autoscaler, which measures no load, keeps them until
// scale_down_delay has passed since that scaling.
func TestAutoscaledCountSurvivesAServerRestart(t *testing.T) {
	opts := Options{Runtime: "process", DataDir: t.TempDir()}
	first, restart := startServerToRestart(t, opts)
	rates := &fakeRates{}
	first.setRequestRates(rates)
	rates.set("main/kept", 15)
	first.submit(replicaService(echoBinary(t), "kept", freeLoopbackPort(t), "v1",
		"replicas: 1..2\nscaling: {metric: rps, target: 10, window: 1s, scale_up_delay: 1s, scale_down_delay: 1h}\n"))
	first.waitReplicas("kept", 2, 60*time.Second)
	before := first.serviceState("kept")
	restart()

	second := startServerWith(t, opts)
	second.admin = first.admin
	second.waitReplicas("kept", 2, 60*time.Second)
	// The new server's autoscaler looks a few times (a sample of the
	// rate each), and the count stays.
	id := second.getRun("kept").ID
	testutil.Eventually(t, 30*time.Second, func() error {
		second.svc.mu.Lock()
		n := len(second.svc.samples[id])
		second.svc.mu.Unlock()
		if n < 4 {
			return fmt.Errorf("the autoscaler sampled the rate %d times", n)
		}
		return nil
	})
	second.waitReplicas("kept", 2, 10*time.Second)
	if after := second.serviceState("kept"); after.Replicas != 2 || !after.LastScaleAt.Equal(before.LastScaleAt) {
		t.Errorf("the run's replica state after the restart: %+v, before: %+v", after, before)
	}
	for _, e := range second.runEvents("kept") {
		if strings.Contains(e.Reason, "autoscaled from 2") {
			t.Errorf("after the restart the service scaled down: %q", e.Reason)
		}
	}
}

// serviceState reads the run's replica state from the store.
func (ts *testServer) serviceState(name string) serviceRunState {
	ts.t.Helper()
	run, err := ts.store.Runs().Get(ts.getRun(name).ID)
	if err != nil {
		ts.t.Fatal(err)
	}
	st, err := runSpecOf(run)
	if err != nil || st.Service == nil {
		ts.t.Fatalf("run %s: %v, service state %+v", name, err, st.Service)
	}
	return *st.Service
}
