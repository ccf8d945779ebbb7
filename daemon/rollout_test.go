package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// TestServiceRollingUpdateKeepsTheOldVersionWhenProbesFail: `gpud apply`
// of a changed service (no force) is a rolling update. A new version
// whose probe fails is never sent requests: the old version answers
// throughout, and once the bound passes the update stops, its replica is
// stopped, and the run and an event say why. A healthy new version then
// replaces the old one: its replica passes its probe, the old one is
// retired, and the new version answers. The probe's method, headers and
// body reach the replica (it answers 200 only to them).
func TestServiceRollingUpdateKeepsTheOldVersionWhenProbesFail(t *testing.T) {
	ts := startServerWith(t, Options{Runtime: "process", RolloutTimeout: 6 * time.Second})
	bin := echoBinary(t)
	probes := "probes:\n  - {type: http, url: /health, method: post, headers: [{name: X-Probe, value: gpud}], body: ping, interval: 1s, timeout: 2s, ready_after: 2}\n"
	ts.submit(replicaService(bin, "roll", freeLoopbackPort(t), "v1", probes))
	ts.waitRun("roll", "running", "", 60*time.Second)
	if b := ts.body200(t, "/proxy/services/main/roll/", 30*time.Second); !strings.Contains(b, "version=v1") {
		t.Fatalf("v1 answered %q", b)
	}

	// v2 listens on its own port (process replicas share the host's
	// network) and fails its probe.
	broken := replicaService(bin, "roll", freeLoopbackPort(t), "broken-v2", probes)
	var plan api.RunPlan
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(broken), &plan)
	if plan.Action != "update" {
		t.Errorf("the plan of a changed running service says %q, want update", plan.Action)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(broken), nil)
	code, se := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(broken), nil)
	if code != http.StatusConflict || !strings.Contains(se.Message, "rolling update") {
		t.Errorf("a second apply during the update: %d %q, want 409 naming the update in progress", code, se.Message)
	}
	testutil.Eventually(t, 60*time.Second, func() error {
		code, body := ts.proxyGet("/proxy/services/main/roll/", "")
		if code != http.StatusOK || !strings.Contains(body, "version=v1") {
			t.Fatalf("during the rolling update the service answered %d %q, want v1", code, body)
		}
		if r := ts.getRun("roll"); !strings.Contains(r.Reason, "failed") {
			return fmt.Errorf("the update has not failed yet: %s", r.Reason)
		}
		return nil
	})
	ev := ts.waitEvent("roll", 10*time.Second, "rolling update to deployment 1 failed", "not ready within 6s", "HTTP 503", "the previous configuration keeps serving")
	r := ts.getRun("roll")
	if r.Status != "running" || r.Reason != ev.Reason {
		t.Errorf("after the failed update the run is %s (%q), want running with the event's reason %q", r.Status, r.Reason, ev.Reason)
	}
	if b := ts.body200(t, "/proxy/services/main/roll/", 10*time.Second); !strings.Contains(b, "version=v1") {
		t.Errorf("after the failed update the service answered %q, want v1", b)
	}
	if !strings.Contains(string(r.Configuration), "v1") || strings.Contains(string(r.Configuration), "broken") {
		t.Errorf("the failed update left the new configuration on the run: %s", r.Configuration)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		for _, j := range ts.store.Jobs().ByRun(r.ID) {
			js, err := jobSpecOf(j)
			if err != nil {
				return err
			}
			if js.Deployment == 1 && !finishedJob(j.Status) {
				return fmt.Errorf("the new version's replica %s is still %s", j.Name, j.Status)
			}
		}
		return nil
	})

	// A healthy v3 replaces v1.
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/apply",
		yamlApply(replicaService(bin, "roll", freeLoopbackPort(t), "v3", probes)), nil)
	ts.waitEvent("roll", 60*time.Second, "rolling update to deployment 2 done", "1 replicas")
	if b := ts.body200(t, "/proxy/services/main/roll/", 10*time.Second); !strings.Contains(b, "version=v3") {
		t.Errorf("after the update the service answered %q, want v3", b)
	}
	ts.waitEvent("roll", 10*time.Second, "replaced by deployment 2")
	testutil.Eventually(t, 30*time.Second, func() error {
		for _, j := range ts.store.Jobs().ByRun(r.ID) {
			js, err := jobSpecOf(j)
			if err != nil {
				return err
			}
			if js.Deployment != 2 && !finishedJob(j.Status) {
				return fmt.Errorf("replica %s of deployment %d is still %s", j.Name, js.Deployment, j.Status)
			}
		}
		return nil
	})
	if got := ts.activeReplicas("roll"); got[store.JobRunning] != 1 || len(got) != 1 {
		t.Errorf("after the update: %v, want one running replica", got)
	}
}

// TestServiceRollingUpdateStopsWhenANewReplicaExits: a new version whose
// replica exits stops the update at once (no wait for the bound), and
// the old version keeps answering.
func TestServiceRollingUpdateStopsWhenANewReplicaExits(t *testing.T) {
	ts := startServer(t, "") // the default bound (15m) is never reached here
	bin := echoBinary(t)
	ts.submit(replicaService(bin, "crash", freeLoopbackPort(t), "v1", ""))
	ts.waitRun("crash", "running", "", 60*time.Second)
	ts.body200(t, "/proxy/services/main/crash/", 30*time.Second)
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(`type: service
name: crash
port: 8000
auth: false
commands: ['echo broken; exit 3']
resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
`), nil)
	ev := ts.waitEvent("crash", 60*time.Second, "rolling update to deployment 1 failed: new replica crash-1-0 ended (failed", "the previous configuration keeps serving")
	if r := ts.getRun("crash"); r.Status != "running" || r.Reason != ev.Reason {
		t.Errorf("after the failed update the run is %s (%q)", r.Status, r.Reason)
	}
	if b := ts.body200(t, "/proxy/services/main/crash/", 10*time.Second); !strings.Contains(b, "version=v1") {
		t.Errorf("after the failed update the service answered %q, want v1", b)
	}
}
