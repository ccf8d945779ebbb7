package kubernetes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/kubetest"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/plugins"
)

func TestOffersShowTheKWOKNodesGPUs(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	offers, err := b.Offers(ctx, plugins.OfferQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range offers {
		names = append(names, o.Instance)
		r := o.Resources
		if r.GPUs != 8 || r.GPUName != "H100" || r.GPUMemory != 81559*api.MB || r.CPUs != 64 || r.Memory != 512*api.GB || o.Backend != "kubernetes" || o.Available != "available" {
			t.Errorf("offer %+v", o)
		}
	}
	if !slices.Equal(names, []string{"kwok-gpu-0", "kwok-gpu-1"}) {
		t.Fatalf("offers on %v", names)
	}
	for _, q := range []plugins.OfferQuery{{GPUName: "H100"}, {GPUName: "h100"}, {GPUs: 8}} {
		if got, err := b.Offers(ctx, q); err != nil || len(got) != 2 {
			t.Errorf("query %+v: %d offers, %v", q, len(got), err)
		}
	}
	for _, q := range []plugins.OfferQuery{{GPUName: "A100"}, {GPUs: 9}} {
		if got, err := b.Offers(ctx, q); err != nil || len(got) != 0 {
			t.Errorf("query %+v: %d offers, %v", q, len(got), err)
		}
	}
	// A running job's GPUs are no longer offered.
	g := plugins.Gang{ID: "holds-6", Jobs: []api.JobSpec{job("holds-6-0", 6, "sleep infinity")}}
	if err := b.StartGang(ctx, g); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(ctx, g.ID, 0) }()
	waitStates(t, b, g.ID, 1, api.JobRunning)
	offers, err = b.Offers(ctx, plugins.OfferQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(offers) != 2 || offers[0].Resources.GPUs != 8 || offers[1].Resources.GPUs != 2 || offers[1].Resources.CPUs != 62 {
		t.Fatalf("offers with 6 GPUs held: %+v", offers)
	}
}

func TestBadKubeconfigFailsClearly(t *testing.T) {
	// No cluster needed: a missing file fails at New, naming it.
	missing := filepath.Join(t.TempDir(), "nope.kubeconfig")
	if _, err := New(Config{Kubeconfig: missing}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing kubeconfig: %v", err)
	}
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, []byte("{{{ not yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Kubeconfig: garbage}); err == nil || !strings.Contains(err.Error(), "is not a kubeconfig") {
		t.Fatalf("garbage kubeconfig: %v", err)
	}
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "no cluster") {
		t.Fatalf("empty config: %v", err)
	}
	if _, err := New(Config{KubeconfigData: "apiVersion: v1\nkind: Config\n", Namespace: "Bad_NS"}); err == nil || !strings.Contains(err.Error(), "namespace") {
		t.Fatalf("bad namespace: %v", err)
	}

	c := kubetest.Need(t)
	data, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// A wrong token reaches the server and is refused.
	wrong := strings.Replace(string(data), "kubetest-admin-token", "wrong-token", 1)
	b, err := New(Config{KubeconfigData: wrong})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Check(context.Background()); err == nil || !strings.Contains(err.Error(), c.Host+" refused the kubeconfig's credentials (401 Unauthorized)") {
		t.Fatalf("wrong token: %v", err)
	}
	// An address nothing listens on.
	dead := strings.Replace(string(data), c.Host, "https://127.0.0.1:1", 1)
	b, err = New(Config{KubeconfigData: dead, TimeoutSeconds: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "cannot reach https://127.0.0.1:1") {
		t.Fatalf("dead server: %v", err)
	}
	// A context the kubeconfig lacks.
	if _, err := New(Config{KubeconfigData: string(data), Context: "elsewhere"}); err == nil || !strings.Contains(err.Error(), "elsewhere") {
		t.Fatalf("unknown context: %v", err)
	}
}

func TestVolumeIsAPVC(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	v, err := b.CreateVolume(ctx, api.VolumeSpec{Name: "data", Backend: "kubernetes", Size: api.SizeSpec(100 * api.GB),
		StorageClassName: "fast", AccessModes: []string{"ReadWriteMany"}})
	if err != nil {
		t.Fatal(err)
	}
	pvc, err := b.cs.CoreV1().PersistentVolumeClaims(b.Namespace()).Get(ctx, v.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if q.Value() != int64(100*api.GB) || *pvc.Spec.StorageClassName != "fast" || pvc.Spec.AccessModes[0] != corev1.ReadWriteMany || v.State != "Pending" {
		t.Fatalf("pvc %+v, volume %+v", pvc.Spec, v)
	}
	// Creating it again is idempotent.
	if again, err := b.CreateVolume(ctx, api.VolumeSpec{Name: "data", Backend: "kubernetes", Size: api.SizeSpec(100 * api.GB)}); err != nil || again.ID != v.ID {
		t.Fatalf("again: %+v %v", again, err)
	}
	// A job mounts it by the id CreateVolume returned.
	j := job("uses-vol-0", 0, "ls /data")
	j.Volumes = []api.JobVolume{{Path: "/data", Managed: &api.ManagedVolumeRef{ID: v.ID}}}
	p, err := b.pod(plugins.Gang{ID: "uses-vol", Jobs: []api.JobSpec{j}}, 0, "base", "")
	if err != nil || p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != v.ID {
		t.Fatalf("pod volume: %v %+v", err, p)
	}
	// A claim made by someone else is registered, and never deleted.
	theirs := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := b.cs.CoreV1().PersistentVolumeClaims(b.Namespace()).Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reg, err := b.CreateVolume(ctx, api.VolumeSpec{Name: "shared", Backend: "kubernetes", ClaimName: "theirs"})
	if err != nil || reg.ID != "theirs" || reg.Size != api.GB {
		t.Fatalf("registered: %+v %v", reg, err)
	}
	if _, err := b.CreateVolume(ctx, api.VolumeSpec{Name: "x", Backend: "kubernetes", ClaimName: "absent"}); err == nil {
		t.Fatal("registering a missing claim succeeded")
	}
	if err := b.DeleteVolume(ctx, "theirs"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.cs.CoreV1().PersistentVolumeClaims(b.Namespace()).Get(ctx, "theirs", metav1.GetOptions{}); err != nil {
		t.Fatalf("a registered claim was deleted: %v", err)
	}
	if err := b.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, func() error {
		// The pvc-protection finalizer stays without a controller
		// manager (none runs here): deleting is what the backend does.
		pvc, err := b.cs.CoreV1().PersistentVolumeClaims(b.Namespace()).Get(ctx, v.ID, metav1.GetOptions{})
		if err == nil && pvc.DeletionTimestamp == nil {
			return fmt.Errorf("claim %s still there", v.ID)
		}
		return nil
	})
	if err := b.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatalf("deleting again: %v", err)
	}
}

func TestGangIsAllOrNothing(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	// A quota of one pod: the gang's second pod is refused at admission.
	// No controller manager computes quota usage here, so the test sets
	// the quota's status itself.
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "one-pod"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}}}
	rq, err := b.cs.CoreV1().ResourceQuotas(b.Namespace()).Create(ctx, quota, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rq.Status = corev1.ResourceQuotaStatus{Hard: rq.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
	if _, err := b.cs.CoreV1().ResourceQuotas(b.Namespace()).UpdateStatus(ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := plugins.Gang{ID: "too-big", Jobs: []api.JobSpec{job("too-big-0", 1, "true"), job("too-big-1", 1, "true")}}
	err = b.StartGang(ctx, g)
	if err == nil || !strings.Contains(err.Error(), "pod "+podHost(gangBase(g.ID), 1)) || !strings.Contains(err.Error(), "removed the gang's other objects") {
		t.Fatalf("StartGang over quota: %v", err)
	}
	waitGone(t, b, g.ID)

	// A job the backend cannot express fails before anything exists.
	bad := job("named-user-0", 0, "true")
	bad.User = "alice"
	if err := b.StartGang(ctx, plugins.Gang{ID: "named-user", Jobs: []api.JobSpec{bad}}); err == nil || !strings.Contains(err.Error(), "numeric uid") {
		t.Fatalf("user name: %v", err)
	}
	frac := job("frac-0", 1, "true")
	frac.GPUs.Share = 0.5
	if err := b.StartGang(ctx, plugins.Gang{ID: "frac", Jobs: []api.JobSpec{frac}}); err == nil || !strings.Contains(err.Error(), "KAI") {
		t.Fatalf("fraction without KAI: %v", err)
	}
	if left := gangObjects(t, b, "named-user"); left != "" {
		t.Fatalf("refused gang left %s", left)
	}
}

func TestLogsComeFromThePodLogAPI(t *testing.T) {
	b, _ := newBackend(t)
	ctx := context.Background()
	g := plugins.Gang{ID: "talks", Jobs: []api.JobSpec{job("talks-0", 0, "echo hello")}}
	if err := b.StartGang(ctx, g); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(ctx, g.ID, 0) }()
	waitStates(t, b, g.ID, 1, api.JobRunning)
	var lines []string
	err := b.Logs(ctx, "talks-0", false, func(e api.JobLogEntry) error {
		if e.Time.IsZero() || e.Stream != api.LogStdout {
			return fmt.Errorf("entry %+v", e)
		}
		lines = append(lines, e.Line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lines, kubetest.SharedLogLines) {
		t.Fatalf("logs %q, want %q", lines, kubetest.SharedLogLines)
	}
	if err := b.Logs(ctx, "nobody", false, func(api.JobLogEntry) error { return nil }); err == nil || !strings.Contains(err.Error(), "no pod") {
		t.Fatalf("logs of an unknown job: %v", err)
	}
}
