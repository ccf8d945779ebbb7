package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/kubetest"
	"gpud.dev/gpud/internal/testutil"
)

// kubeServer is a server without hosts whose project main has the
// built-in Kubernetes backend "k8s" (run as `gpud plugin serve
// kubernetes`, a subprocess of a gpud built for the test) on a real
// kube-apiserver with two 8-GPU KWOK nodes, namespace gpud.
func kubeServer(t *testing.T) (*testServer, *kubetest.Cluster) {
	t.Helper()
	return kubeServerWith(t, nil)
}

// kubeServerWith is kubeServer with extra settings in the backend's
// configuration (allow_privileged...).
func kubeServerWith(t *testing.T, extra map[string]any) (*testServer, *kubetest.Cluster) {
	t.Helper()
	return kubeServerOn(t, kubetest.Options{}, extra)
}

// kubeServerOn is kubeServerWith on a cluster started with copts (a
// port-forward target).
func kubeServerOn(t *testing.T, copts kubetest.Options, extra map[string]any) (*testServer, *kubetest.Cluster) {
	t.Helper()
	c := kubetest.StartWithT(t, copts)
	bin := os.Getenv(testutil.StaticGpudEnv)
	if bin == "" {
		var err error
		if bin, err = testutil.BuildStaticGpud(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	ts := startServerWith(t, Options{NoLocalAgent: true, BuiltinBackends: []string{"kubernetes"}, PluginCommand: []string{bin, "plugin", "serve"}})
	settings := map[string]any{"kubeconfig": c.Kubeconfig, "namespace": "gpud"}
	for k, v := range extra {
		settings[k] = v
	}
	cfg, err := json.Marshal(settings)
	if err != nil {
		t.Fatal(err)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "k8s", Type: "kubernetes", Config: cfg}, nil)
	return ts, c
}

// gangPods lists the pods the backend made in namespace gpud.
func gangPods(t *testing.T, c *kubetest.Cluster) []corev1.Pod {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("gpud").List(context.Background(), metav1.ListOptions{LabelSelector: "gpud.dev/gang"})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// gangLeft says what of any gang is left in namespace gpud.
func gangLeft(c *kubetest.Cluster) error {
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: "gpud.dev/gang"}
	pods, err := c.Client.CoreV1().Pods("gpud").List(ctx, sel)
	if err != nil {
		return err
	}
	svcs, err := c.Client.CoreV1().Services("gpud").List(ctx, sel)
	if err != nil {
		return err
	}
	cms, err := c.Client.CoreV1().ConfigMaps("gpud").List(ctx, sel)
	if err != nil {
		return err
	}
	if n := len(pods.Items) + len(svcs.Items) + len(cms.Items); n > 0 {
		return fmt.Errorf("%d pods, %d services, %d configmaps left", len(pods.Items), len(svcs.Items), len(cms.Items))
	}
	return nil
}

// TestKubernetesBackendRunsATwoNodeTask is issue 17's Kubernetes
// acceptance through the server: the offers show the KWOK nodes' GPUs; a
// 2-node task becomes two pods that reach Running with the DSTACK_*
// cluster environment, finish (KWOK ends them with exit 0), and are
// cleaned up with their headless Service; a stopped run's pods are
// deleted.
func TestKubernetesBackendRunsATwoNodeTask(t *testing.T) {
	ts, c := kubeServer(t)
	var offers []api.Offer
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/offers?gpu=H100:8", nil, &offers)
	gpus := 0.0
	for _, o := range offers {
		if o.Backend == "k8s" && o.Resources.GPUName == "H100" {
			gpus += o.Resources.GPUs
		}
	}
	if gpus != 16 {
		var list []api.Backend
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/backends", nil, &list)
		var all []api.Offer
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/offers", nil, &all)
		t.Fatalf("offers: %+v; without a query %+v; backends %+v", offers, all, list)
	}

	ts.submit("type: task\nname: mn\nnodes: 2\nimage: busybox\ncommands:\n  - torchrun train.py\nresources:\n  gpu: H100:4\n")
	ts.waitRun("mn", "running", "", 2*time.Minute)
	pods := gangPods(t, c)
	if len(pods) != 2 {
		t.Fatalf("%d pods", len(pods))
	}
	for _, p := range pods {
		env := map[string]string{}
		for _, e := range p.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if env["DSTACK_NODES_NUM"] != "2" || env["DSTACK_RUN_NAME"] != "mn" || env["DSTACK_GPUS_PER_NODE"] != "4" || !strings.HasSuffix(env["DSTACK_MASTER_NODE_IP"], ".gpud.svc") {
			t.Errorf("pod %s env %v", p.Name, env)
		}
		if p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s is %s", p.Name, p.Status.Phase)
		}
		if err := c.Finish(context.Background(), "gpud", p.Name, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	ts.waitRun("mn", "done", "", 2*time.Minute)
	testutil.Eventually(t, time.Minute, func() error { return gangLeft(c) })
	// Each job's output came through the pod log API into the run's logs.
	if logs := ts.logText("mn"); strings.Count(logs, kubetest.SharedLogLines[0]) != 2 {
		t.Errorf("the run's logs (each pod's lines once): %q", logs)
	}

	ts.submit("type: task\nname: st\nimage: busybox\ncommands:\n  - sleep infinity\nresources:\n  gpu: H100:1\n")
	ts.waitRun("st", "running", "", 2*time.Minute)
	if n := len(gangPods(t, c)); n != 1 {
		t.Fatalf("%d pods for st", n)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/st/stop", api.StopRunRequest{}, nil)
	ts.waitRun("st", "terminated", "", 2*time.Minute)
	testutil.Eventually(t, time.Minute, func() error { return gangLeft(c) })
}

// TestKubernetesPluginCrashAndBadKubeconfig: a wrong kubeconfig is refused
// at `backend add` naming what the API server said, and the stored backend
// stays; the Kubernetes plugin subprocess killed during a run is started
// again, the run stays running on its pod, and KWOK's finish of the pod
// still ends the run and removes the gang.
func TestKubernetesPluginCrashAndBadKubeconfig(t *testing.T) {
	ts, c := kubeServer(t)
	data, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := json.Marshal(map[string]any{"kubeconfig_data": strings.Replace(string(data), "kubetest-admin-token", "stolen", 1), "namespace": "gpud"})
	if err != nil {
		t.Fatal(err)
	}
	code, e := ts.call(ts.admin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "k8s", Type: "kubernetes", Config: wrong}, nil)
	if msg := e.Message + strings.Join(e.Errors, "\n"); code == http.StatusOK || !strings.Contains(msg, "401 Unauthorized") {
		t.Fatalf("a wrong token at backend add: %d %v", code, e)
	}
	missing, err := json.Marshal(map[string]any{"kubeconfig": "/nonexistent/kubeconfig"})
	if err != nil {
		t.Fatal(err)
	}
	code, e = ts.call(ts.admin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "k8s", Type: "kubernetes", Config: missing}, nil)
	if msg := e.Message + strings.Join(e.Errors, "\n"); code == http.StatusOK || !strings.Contains(msg, "/nonexistent/kubeconfig") {
		t.Fatalf("a missing kubeconfig at backend add: %d %v", code, e)
	}

	ts.submit("type: task\nname: crash\nimage: busybox\ncommands:\n  - sleep infinity\nresources:\n  gpu: H100:2\n")
	ts.waitRun("crash", "running", "", 2*time.Minute)
	first := ts.backendOut(mustRecord(t, ts, "main/k8s")).Pid
	if first == 0 {
		t.Fatal("no plugin pid")
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, func() error {
		out := ts.backendOut(mustRecord(t, ts, "main/k8s"))
		if out.Pid == first || out.Pid == 0 || out.State != "running" {
			return fmt.Errorf("plugin not restarted yet: %+v", out)
		}
		return nil
	})
	if r := ts.getRun("crash"); r.Status != "running" {
		t.Fatalf("after the plugin's restart the run is %s (%s)", r.Status, r.Reason)
	}
	pods := gangPods(t, c)
	if len(pods) != 1 {
		t.Fatalf("%d pods after the plugin's restart", len(pods))
	}
	if err := c.Finish(context.Background(), "gpud", pods[0].Name, 0, ""); err != nil {
		t.Fatal(err)
	}
	ts.waitRun("crash", "done", "", 2*time.Minute)
	testutil.Eventually(t, time.Minute, func() error { return gangLeft(c) })
}
