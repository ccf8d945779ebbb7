package kubernetes

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/kubetest"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/plugins"
)

var namespaces atomic.Int64

func TestMain(m *testing.M) {
	code := m.Run()
	kubetest.StopShared()
	os.Exit(code)
}

// newBackend returns a backend on the shared cluster in a namespace of
// its own, which Check creates.
func newBackend(t testing.TB, mutate ...func(*Config)) (*Backend, *kubetest.Cluster) {
	t.Helper()
	c := kubetest.Need(t)
	// A namespace per call: the shared cluster outlives a test (-count),
	// and no controller manager deletes namespaces here.
	ns := dnsLabel("t-", fmt.Sprintf("%s-%d", strings.ToLower(t.Name()), namespaces.Add(1)), 40)
	cfg := Config{Kubeconfig: c.Kubeconfig, Namespace: ns}
	for _, f := range mutate {
		f(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b, c
}

func job(id string, gpus int, commands ...string) api.JobSpec {
	devs := make([]string, gpus)
	for i := range devs {
		devs[i] = fmt.Sprint(i)
	}
	return api.JobSpec{ID: id, RunName: "train", Image: "busybox:1.36", Commands: commands,
		GPUs: api.JobGPUs{Devices: devs}, CPUs: 2, Memory: 4 * api.GB, Env: map[string]string{"MY_VAR": "x"}}
}

func waitStates(t testing.TB, b *Backend, gang string, n int, want api.JobState) []api.JobStatus {
	t.Helper()
	var got []api.JobStatus
	testutil.Eventually(t, 2*time.Minute, func() error {
		st, err := b.Status(context.Background(), gang)
		if err != nil {
			return err
		}
		got = st
		if len(st) != n {
			return fmt.Errorf("%d jobs, want %d: %+v", len(st), n, st)
		}
		for _, s := range st {
			if s.State != want {
				return fmt.Errorf("job %s is %s (%s), want %s", s.ID, s.State, s.Message, want)
			}
		}
		return nil
	})
	return got
}

// gangObjects counts what is left with the gang's label.
func gangObjects(t testing.TB, b *Backend, gang string) string {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: labelGang + "=" + labelValue(gang)}
	ns := b.Namespace()
	pods, err := b.cs.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	svcs, err := b.cs.CoreV1().Services(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	cms, err := b.cs.CoreV1().ConfigMaps(ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items)+len(svcs.Items)+len(cms.Items) == 0 {
		return ""
	}
	return fmt.Sprintf("%d pods, %d services, %d configmaps", len(pods.Items), len(svcs.Items), len(cms.Items))
}

func waitGone(t testing.TB, b *Backend, gang string) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, func() error {
		if left := gangObjects(t, b, gang); left != "" {
			return fmt.Errorf("gang %s still has %s", gang, left)
		}
		return nil
	})
}

func TestTwoNodeGangRunsWithClusterEnvFinishesAndIsCleanedUp(t *testing.T) {
	b, c := newBackend(t)
	ctx := context.Background()
	g := plugins.Gang{ID: "run-7f3a/1", Project: "main", Jobs: []api.JobSpec{
		job("run-7f3a-0", 4, "python train.py", "echo done"), job("run-7f3a-1", 4, "python train.py", "echo done")}}
	if err := b.StartGang(ctx, g); err != nil {
		t.Fatal(err)
	}
	// A retry (after a plugin restart) is a no-op.
	if err := b.StartGang(ctx, g); err != nil {
		t.Fatalf("second StartGang: %v", err)
	}
	waitStates(t, b, g.ID, 2, api.JobRunning)
	gangs, err := b.List(ctx)
	if err != nil || len(gangs) != 1 || gangs[0] != g.ID {
		t.Fatalf("List = %v, %v; want [%s]", gangs, err, g.ID)
	}
	base := gangBase(g.ID)
	headless, err := b.cs.CoreV1().Services(b.Namespace()).Get(ctx, base, metav1.GetOptions{})
	if err != nil || headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("headless service %s: %v %+v", base, err, headless)
	}
	master := fmt.Sprintf("%s-0.%s.%s.svc", base, base, b.Namespace())
	for rank := range 2 {
		p, err := b.cs.CoreV1().Pods(b.Namespace()).Get(ctx, podHost(base, rank), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, e := range p.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		want := map[string]string{
			"DSTACK_NODE_RANK": fmt.Sprint(rank), "DSTACK_NODES_NUM": "2", "DSTACK_MASTER_NODE_IP": master,
			"DSTACK_GPUS_PER_NODE": "4", "DSTACK_GPUS_NUM": "8", "GPUD_NODE_RANK": fmt.Sprint(rank),
			"DSTACK_RUN_NAME": "train", "MY_VAR": "x",
			"DSTACK_NODES_IPS": master + "\n" + fmt.Sprintf("%s-1.%s.%s.svc", base, base, b.Namespace()),
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("pod %d: %s=%q, want %q", rank, k, env[k], v)
			}
		}
		if got := strings.Join(p.Spec.Containers[0].Command, " "); got != "/bin/sh -c python train.py && echo done" {
			t.Errorf("command %q", got)
		}
		gpu := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
		if gpu.Value() != 4 || p.Labels[labelProject] != "main" || p.Spec.Subdomain != base || len(p.OwnerReferences) != 1 {
			t.Errorf("pod %d: gpu %s, labels %v, subdomain %q, owners %v", rank, gpu.String(), p.Labels, p.Spec.Subdomain, p.OwnerReferences)
		}
		if err := c.Finish(ctx, b.Namespace(), p.Name, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	st := waitStates(t, b, g.ID, 2, api.JobDone)
	if st[0].ExitCode != 0 || st[0].Reason != api.ExitExited || st[0].ID != "run-7f3a-0" {
		t.Errorf("finished status %+v", st[0])
	}
	if err := b.Stop(ctx, g.ID, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, b, g.ID)
	if gangs, err := b.List(ctx); err != nil || len(gangs) != 0 {
		t.Fatalf("after Stop, List = %v, %v", gangs, err)
	}
}

func TestStopDeletesRunningPods(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	g := plugins.Gang{ID: "stop-me", Jobs: []api.JobSpec{job("stop-me-0", 1, "sleep infinity")}}
	if err := b.StartGang(ctx, g); err != nil {
		t.Fatal(err)
	}
	waitStates(t, b, g.ID, 1, api.JobRunning)
	if err := b.Stop(ctx, g.ID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	waitGone(t, b, g.ID)
	st, err := b.Status(ctx, g.ID)
	if err != nil || len(st) != 0 {
		t.Fatalf("status after stop: %+v %v", st, err)
	}
	// Stopping again is no error.
	if err := b.Stop(ctx, g.ID, 0); err != nil {
		t.Fatal(err)
	}
}

func TestFailedJobsReportExitCodeAndOOM(t *testing.T) {
	b, c := newBackend(t)
	ctx := context.Background()
	g := plugins.Gang{ID: "fails", Jobs: []api.JobSpec{job("fails-0", 1, "exit 3"), job("fails-1", 1, "eat memory")}}
	if err := b.StartGang(ctx, g); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(ctx, g.ID, 0) }()
	waitStates(t, b, g.ID, 2, api.JobRunning)
	base := gangBase(g.ID)
	if err := c.Finish(ctx, b.Namespace(), podHost(base, 0), 3, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(ctx, b.Namespace(), podHost(base, 1), 137, "OOMKilled"); err != nil {
		t.Fatal(err)
	}
	st := waitStates(t, b, g.ID, 2, api.JobFailed)
	if st[0].ExitCode != 3 || st[0].Reason != api.ExitExited {
		t.Errorf("exit 3: %+v", st[0])
	}
	if st[1].ExitCode != 137 || st[1].Reason != api.ExitOOMKilled {
		t.Errorf("OOM: %+v", st[1])
	}
}

func TestServiceGangGetsAService(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	j := job("web-0", 1, "python -m http.server 8000")
	j.Ports = []api.JobPort{{Container: 8000}}
	g := plugins.Gang{ID: "web", Service: true, Jobs: []api.JobSpec{j}}
	if err := b.StartGang(ctx, g); err != nil {
		t.Fatal(err)
	}
	waitStates(t, b, g.ID, 1, api.JobRunning)
	svc, err := b.cs.CoreV1().Services(b.Namespace()).Get(ctx, gangBase(g.ID)+"-svc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8000 || svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Fatalf("service %+v", svc.Spec)
	}
	if svc.Spec.Selector[labelGang] != labelValue(g.ID) {
		t.Fatalf("selector %v", svc.Spec.Selector)
	}
	if err := b.Stop(ctx, g.ID, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, b, g.ID)

	// A service whose jobs publish nothing is refused before anything exists.
	bad := plugins.Gang{ID: "no-ports", Service: true, Jobs: []api.JobSpec{job("no-ports-0", 0, "true")}}
	if err := b.StartGang(ctx, bad); err == nil || !strings.Contains(err.Error(), "publish no port") {
		t.Fatalf("StartGang without ports: %v", err)
	}
	if left := gangObjects(t, b, bad.ID); left != "" {
		t.Fatalf("refused gang left %s", left)
	}
}
