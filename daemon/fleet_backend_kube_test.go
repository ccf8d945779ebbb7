package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestKubernetesBackendFleetRunsATwoNodeTaskWithinItsNodesMax: a backend
// fleet `backends: [kubernetes], nodes: 0..2` on the real test cluster
// (kube-apiserver, etcd, KWOK's two 8-GPU nodes): a 2-node task in the
// fleet becomes two pods; a third node waits, though the cluster has 8
// GPUs free, with a reason naming the fleet and its max; when KWOK
// finishes the two pods the third node's pod is created, and stopping it
// leaves nothing of any gang in the namespace.
func TestKubernetesBackendFleetRunsATwoNodeTaskWithinItsNodesMax(t *testing.T) {
	ts, c := kubeServer(t)
	if code, e := ts.applyFleet("main", "type: fleet\nname: kf\nbackends: [kubernetes]\nnodes: 0..2\n"); code != http.StatusOK {
		t.Fatalf("apply: %d %v", code, e)
	}
	ts.submit("type: task\nname: mn\nnodes: 2\nfleets: [kf]\nimage: busybox\ncommands:\n  - sleep infinity\nresources:\n  gpu: H100:4\n")
	ts.waitRun("mn", "running", "", 2*time.Minute)
	if n := len(gangPods(t, c)); n != 2 {
		t.Fatalf("%d pods for the 2-node task", n)
	}
	if f := ts.getFleet("kf"); f.Nodes == nil || f.Nodes.InUse != 2 || len(f.Backends) != 1 || len(f.Backends[0].Selects) != 1 || f.Backends[0].Selects[0] != "k8s" {
		t.Fatalf("fleet kf: %+v nodes %+v", f, f.Nodes)
	}
	ts.submit("type: task\nname: third\nfleets: [kf]\nimage: busybox\ncommands:\n  - sleep infinity\nresources:\n  gpu: H100:1\n")
	testutil.Eventually(t, time.Minute, func() error {
		r := ts.getRun("third")
		if r.Status != "pending" || !strings.Contains(r.WhyPending, `fleet "kf" below its nodes max 2`) {
			return fmt.Errorf("third: %s, why pending %q", r.Status, r.WhyPending)
		}
		return nil
	})
	if n := len(gangPods(t, c)); n != 2 {
		t.Fatalf("%d pods while the fleet is full", n)
	}
	for _, p := range gangPods(t, c) {
		if err := c.Finish(context.Background(), "gpud", p.Name, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	ts.waitRun("mn", "done", "", 2*time.Minute)
	ts.waitRun("third", "running", "", 2*time.Minute)
	testutil.Eventually(t, time.Minute, func() error {
		if n := len(gangPods(t, c)); n != 1 {
			return fmt.Errorf("%d pods for the third node", n)
		}
		return nil
	})
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/third/stop", api.StopRunRequest{}, nil)
	ts.waitRun("third", "terminated", "", 2*time.Minute)
	testutil.Eventually(t, time.Minute, func() error { return gangLeft(c) })
}
