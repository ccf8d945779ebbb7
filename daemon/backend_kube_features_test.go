package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestKubernetesBackendHonoursShmSizeAndPrivilegedWhereAdvertised: the
// fields a Kubernetes backend advertises (plugins.Info.Features) take
// effect in the pod spec the real kube-apiserver holds, and one it does
// not advertise is refused naming the backend. Backend k8s (no
// allow_privileged) advertises shm_size only: a privileged run is refused
// by the plan naming k8s and the feature, and shm_size becomes an emptyDir
// of medium Memory at /dev/shm with that size limit. Backend kp is added
// with allow_privileged: a privileged run then lands on kp (not on k8s)
// and its container's securityContext is privileged.
func TestKubernetesBackendHonoursShmSizeAndPrivilegedWhereAdvertised(t *testing.T) {
	ts, c := kubeServer(t)
	priv := "type: task\nname: pv\nimage: busybox\nprivileged: true\ncommands:\n  - sleep infinity\nresources:\n  gpu: H100:1\n"
	ts.refusedAt(priv, "privileged", "job backend k8s (kubernetes)", "does not advertise privileged", "allow_privileged")

	ts.submit("type: task\nname: shm\nimage: busybox\ncommands:\n  - sleep infinity\nresources:\n  gpu: H100:1\n  shm_size: 1GB\n")
	ts.waitRun("shm", "running", "", 2*time.Minute)
	pods := gangPods(t, c)
	if len(pods) != 1 {
		t.Fatalf("%d pods for shm", len(pods))
	}
	if err := shmOf(pods[0], "1Gi"); err != nil {
		t.Fatal(err)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/shm/stop", api.StopRunRequest{}, nil)
	ts.waitRun("shm", "terminated", "", 2*time.Minute)
	testutil.Eventually(t, time.Minute, func() error { return gangLeft(c) })

	cfg, err := json.Marshal(map[string]any{"kubeconfig": c.Kubeconfig, "namespace": "gpud", "allow_privileged": true})
	if err != nil {
		t.Fatal(err)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "kp", Type: "kubernetes", Config: cfg}, nil)
	ts.submit(priv)
	r := ts.waitRun("pv", "running", "", 2*time.Minute)
	if len(r.Jobs) != 1 || !strings.Contains(r.Jobs[0].Instance, "/kp/") {
		t.Fatalf("the privileged run is not on backend kp: %+v", r.Jobs)
	}
	pods = gangPods(t, c)
	if len(pods) != 1 {
		t.Fatalf("%d pods for pv", len(pods))
	}
	sc := pods[0].Spec.Containers[0].SecurityContext
	if sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Fatalf("the privileged run's container securityContext: %+v", sc)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/pv/stop", api.StopRunRequest{}, nil)
	ts.waitRun("pv", "terminated", "", 2*time.Minute)
	testutil.Eventually(t, time.Minute, func() error { return gangLeft(c) })
}

// shmOf checks that pod p mounts an emptyDir of medium Memory with size
// limit size at /dev/shm.
func shmOf(p corev1.Pod, size string) error {
	vols := map[string]corev1.Volume{}
	for _, v := range p.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		if m.MountPath != "/dev/shm" {
			continue
		}
		v, ok := vols[m.Name]
		if !ok || v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.String() != size {
			return fmt.Errorf("pod %s: /dev/shm is %+v, want an emptyDir of medium Memory limited to %s", p.Name, v, size)
		}
		return nil
	}
	return fmt.Errorf("pod %s mounts nothing at /dev/shm: %+v", p.Name, p.Spec.Containers[0].VolumeMounts)
}
