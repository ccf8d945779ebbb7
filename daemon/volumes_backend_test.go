package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/kubetest"
	"gpud.dev/gpud/internal/testutil"
)

// kubeVolumeServer is kubeServer with a fast resync (the volume cleanup
// loop's tick): project main has the Kubernetes backend k8s on a real
// kube-apiserver with two 8-GPU KWOK nodes, namespace gpud.
func kubeVolumeServer(t *testing.T) (*testServer, *kubetest.Cluster) {
	t.Helper()
	c := kubetest.StartWithT(t, kubetest.Options{})
	bin := os.Getenv(testutil.StaticGpudEnv)
	if bin == "" {
		var err error
		if bin, err = testutil.BuildStaticGpud(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	ts := startServerWith(t, Options{NoLocalAgent: true, BuiltinBackends: []string{"kubernetes"}, PluginCommand: []string{bin, "plugin", "serve"},
		ResyncInterval: 500 * time.Millisecond})
	ts.addKubeBackend("main", "k8s", c)
	return ts, c
}

// addKubeBackend adds, as the global admin, a Kubernetes backend on c to
// project.
func (ts *testServer) addKubeBackend(project, name string, c *kubetest.Cluster) {
	ts.t.Helper()
	cfg, err := json.Marshal(map[string]any{"kubeconfig": c.Kubeconfig, "namespace": "gpud"})
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/"+project+"/backends", api.AddBackendRequest{Name: name, Type: "kubernetes", Config: cfg}, nil)
}

// claim reads a claim of namespace gpud.
func claim(t *testing.T, c *kubetest.Cluster, name string) (*corev1.PersistentVolumeClaim, error) {
	t.Helper()
	return c.Client.CoreV1().PersistentVolumeClaims("gpud").Get(context.Background(), name, metav1.GetOptions{})
}

// claimDeleted says whether the claim is deleted: gone, or (without the
// controller manager, which the test cluster lacks, the pvc-protection
// finalizer stays) marked for deletion.
func claimDeleted(t *testing.T, c *kubetest.Cluster, name string) error {
	pvc, err := claim(t, c, name)
	if apierrors.IsNotFound(err) || err == nil && pvc.DeletionTimestamp != nil {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("claim %s is still there, not being deleted", name)
}

// Issue 17's "volumes become PVCs", through gpud serve and a real
// kube-apiserver: `type: volume` on the Kubernetes backend (by type, or by
// name) is a claim of its size, class and access modes, made at apply
// time; claim_name registers an existing claim; `gpud volume list` shows
// backend, claim, size, state and runs; a run that mounts both is placed
// on that backend (its plan says so) and its pod mounts both claims;
// delete is refused while the run is active (and the backend's delete
// while it keeps volumes), then deletes gpud's claim and leaves the
// registered one; auto_cleanup_duration deletes an unused volume's claim.
// What the test cluster cannot show (no provisioner: claims stay
// Pending; KWOK's pods mount nothing) is in docs/backends.md.
func TestKubernetesVolumeIsAClaimThatItsRunsMount(t *testing.T) {
	ts, c := kubeVolumeServer(t)
	ctx := context.Background()
	alice := ts.userMember("alice")

	data := ts.applyVolume(alice, "main", "type: volume\nname: data\nbackend: kubernetes\nsize: 10GB\nstorage_class_name: fast\naccess_modes: [ReadWriteMany]\n")
	if data.Backend != "k8s" || data.BackendType != "kubernetes" || data.Claim == "" || data.Registered || data.Status != volumeActive || data.State != "Pending" || data.Size != api.Size(10*api.GB) {
		t.Fatalf("a new Kubernetes volume: %+v", data)
	}
	pvc, err := claim(t, c, data.Claim)
	if err != nil {
		t.Fatalf("the claim %s: %v", data.Claim, err)
	}
	q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if q.Value() != int64(10*api.GB) || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "fast" ||
		!slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) || pvc.Annotations["gpud.dev/volume-name"] != "main/data" {
		t.Fatalf("the claim in the API server: %+v %+v", pvc.ObjectMeta, pvc.Spec)
	}
	// Applying it again finds the same claim.
	if again := ts.applyVolume(alice, "main", "type: volume\nname: data\nbackend: k8s\nsize: 10GB\nstorage_class_name: fast\naccess_modes: [ReadWriteMany]\n"); again.Claim != data.Claim {
		t.Fatalf("re-applied: %+v, want claim %s", again, data.Claim)
	}

	theirs := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "theirs"}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims("gpud").Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	shared := ts.applyVolume(alice, "main", "type: volume\nname: shared\nbackend: k8s\nclaim_name: theirs\n")
	if shared.Claim != "theirs" || !shared.Registered || shared.Size != api.GB {
		t.Fatalf("a registered claim: %+v", shared)
	}

	task := "type: task\nname: vr\nimage: busybox\ncommands: [sleep infinity]\nresources:\n  gpu: H100:1\nvolumes:\n  - name: data\n    path: /data\n  - name: shared\n    path: /shared\n"
	var plan api.RunPlan
	ts.must(http.StatusOK, alice, "POST", "/api/v1/projects/main/runs/plan", yamlApply(task), &plan)
	if !slices.ContainsFunc(plan.Notes, func(n string) bool {
		return strings.Contains(n, "volume data is the claim "+data.Claim+" of the backend k8s (kubernetes), so jobs that use it run only on that backend")
	}) {
		t.Errorf("the plan does not say where the run goes: %q", plan.Notes)
	}
	ts.must(http.StatusCreated, alice, "POST", "/api/v1/projects/main/runs/apply", yamlApply(task), nil)
	run := ts.waitRun("vr", "running", "", 2*time.Minute)
	if !strings.HasPrefix(run.Jobs[0].Instance, "backend:main/k8s/") {
		t.Fatalf("the run's job is on %q, want the backend k8s", run.Jobs[0].Instance)
	}
	pods := gangPods(t, c)
	if len(pods) != 1 {
		t.Fatalf("%d pods", len(pods))
	}
	mounts := map[string]string{} // path -> claim
	claims := map[string]string{} // volume name in the pod -> claim
	for _, v := range pods[0].Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	for _, m := range pods[0].Spec.Containers[0].VolumeMounts {
		if cl, ok := claims[m.Name]; ok {
			mounts[m.MountPath] = cl
		}
	}
	if mounts["/data"] != data.Claim || mounts["/shared"] != "theirs" {
		t.Fatalf("the pod mounts %v (volumes %+v)", mounts, pods[0].Spec.Volumes)
	}
	listed, ok := ts.volumeNamed("main", "data")
	if !ok || !slices.Equal(listed.Runs, []string{"vr"}) || listed.Claim != data.Claim || listed.State != "Pending" {
		t.Fatalf("volume list: %+v", listed)
	}

	// Nothing deletes a volume, nor its backend, while a run uses it.
	if code, se := ts.call(alice, "DELETE", "/api/v1/projects/main/volumes/data", nil, nil); code != http.StatusConflict || !strings.Contains(se.Message, "vr") {
		t.Fatalf("delete of a volume in use: %d %+v", code, se)
	}
	if code, se := ts.call(ts.admin, "DELETE", "/api/v1/projects/main/backends/k8s", nil, nil); code != http.StatusConflict {
		t.Fatalf("delete of the backend: %d %+v", code, se)
	}
	ts.must(http.StatusOK, alice, "POST", "/api/v1/projects/main/runs/vr/stop", api.StopRunRequest{}, nil)
	ts.waitRun("vr", "terminated", "", 2*time.Minute)

	// The run's gang is gone, and the volumes with it? No: they stay.
	if err := claimDeleted(t, c, data.Claim); err == nil {
		t.Fatal("the claim went with the run")
	}
	ts.must(http.StatusNoContent, alice, "DELETE", "/api/v1/projects/main/volumes/data", nil, nil)
	testutil.Eventually(t, time.Minute, func() error { return claimDeleted(t, c, data.Claim) })
	ts.must(http.StatusNoContent, alice, "DELETE", "/api/v1/projects/main/volumes/shared", nil, nil)
	if pvc, err := claim(t, c, "theirs"); err != nil || pvc.DeletionTimestamp != nil {
		t.Fatalf("the registered claim after its volume's delete: %v %+v", err, pvc)
	}
	if _, ok := ts.volumeNamed("main", "shared"); ok {
		t.Fatal("volume shared is still listed")
	}

	// auto_cleanup_duration: an unused volume goes, and its claim.
	scratch := ts.applyVolume(alice, "main", "type: volume\nname: scratch\nbackend: kubernetes\nsize: 1GB\nauto_cleanup_duration: 2s\n")
	testutil.Eventually(t, time.Minute, func() error {
		if _, ok := ts.volumeNamed("main", "scratch"); ok {
			return fmt.Errorf("volume scratch is still there")
		}
		return claimDeleted(t, c, scratch.Claim)
	})
	// No volume left on it: the backend may go.
	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/main/backends/k8s", nil, nil)
}

// Bad input at apply time names the volume and the field, and loses
// nothing stored; a plan that could not place a run on its volume's
// backend is refused by name; another project's claim is not registered.
func TestKubernetesVolumeBadInputIsRefusedAndLosesNothing(t *testing.T) {
	ts, c := kubeVolumeServer(t)
	alice := ts.userMember("alice")
	refused := func(project, yaml string, want int, field string, words ...string) {
		t.Helper()
		code, se := ts.call(alice, "POST", "/api/v1/projects/"+project+"/volumes/apply", api.ApplyRequest{ConfigurationYAML: yaml, Filename: "volume.yml"}, nil)
		msg := se.Message + " " + strings.Join(se.Errors, " ")
		t.Logf("%s: %d %s: %s", strings.ReplaceAll(yaml, "\n", "; "), code, se.Field, msg)
		if code != want || (field != "" && se.Field != field && !strings.Contains(msg, field)) {
			t.Fatalf("apply of %q: %d %+v, want %d naming %s", yaml, code, se, want, field)
		}
		for _, w := range words {
			if !strings.Contains(msg, w) {
				t.Fatalf("apply of %q: %q lacks %q", yaml, msg, w)
			}
		}
	}
	data := ts.applyVolume(alice, "main", "type: volume\nname: data\nbackend: kubernetes\nsize: 1GB\n")

	refused("main", "type: volume\nname: v\nbackend: nope\nsize: 1GB\n", http.StatusBadRequest, "configuration.backend", "volume v", `no backend "nope"`, "k8s (kubernetes)")
	refused("main", "type: volume\nname: v\nbackend: kubernetes\nclaim_name: absent\n", http.StatusBadRequest, "configuration.claim_name", "volume v", "absent", "not found")
	refused("main", "type: volume\nname: v\nbackend: kubernetes\n", http.StatusBadRequest, "configuration.size", "volume v", "size")
	refused("main", "type: volume\nname: v\nbackend: kubernetes\nclaim_name: theirs\nsize: 1GB\n", http.StatusBadRequest, "configuration.size", "claim_name")
	refused("main", "type: volume\nname: v\nbackend: local\nclaim_name: theirs\n", http.StatusUnprocessableEntity, "claim_name", "gpud host volume")
	// A change the volume cannot take is refused; it stays as it was.
	refused("main", "type: volume\nname: data\nbackend: local\n", http.StatusConflict, "", "claim "+data.Claim)
	refused("main", "type: volume\nname: data\nbackend: kubernetes\nclaim_name: other\n", http.StatusConflict, "", "delete it first")
	refused("main", "type: volume\nname: data\nbackend: kubernetes\nsize: 2GB\n", http.StatusConflict, "", "made with size 1GB", "does not change a claim")
	vs := ts.volumes("main")
	if len(vs) != 1 || vs[0].Name != "data" || vs[0].Claim != data.Claim {
		t.Fatalf("after the refusals the volumes are %+v, want data as it was", vs)
	}

	// Plans that could not place a run on the volume's backend.
	ts.applyVolume(alice, "main", "type: volume\nname: hostvol\nbackend: local\n")
	vol := "volumes:\n  - name: data\n    path: /data\n"
	ts.refusedAt("type: task\nimage: busybox\ncommands: [true]\nbackends: [local]\n"+vol, "volumes[0].name", "claim "+data.Claim, "backends (local)")
	ts.refusedAt("type: dev-environment\nide: vscode\n"+vol, "volumes[0].name", "hosts only")
	ts.refusedAt("type: task\nimage: busybox\ncommands: [true]\n"+vol+"  - name: hostvol\n    path: /h\n", "volumes[0].name", `"hostvol" is a gpud host volume`)
	ts.refusedAt("type: task\nimage: busybox\ncommands: [true]\nports: [8080]\n"+vol, "volumes[0].name", "does not honour ports")

	// Another project on the same cluster: its volume of the same name is
	// another claim, and main's claim is not its to register.
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/other/members/alice", api.SetMemberRequest{Role: "user"}, nil)
	ts.addKubeBackend("other", "k8s", c)
	theirs := ts.applyVolume(alice, "other", "type: volume\nname: data\nbackend: kubernetes\nsize: 1GB\n")
	if theirs.Claim == data.Claim {
		t.Fatalf("two projects' volumes data share the claim %s", data.Claim)
	}
	refused("other", "type: volume\nname: steal\nbackend: kubernetes\nclaim_name: "+data.Claim+"\n", http.StatusBadRequest, "configuration.claim_name", "main/data")
	// A deleted backend: its volumes go first, then applying names it gone.
	ts.must(http.StatusNoContent, alice, "DELETE", "/api/v1/projects/other/volumes/data", nil, nil)
	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/other/backends/k8s", nil, nil)
	refused("other", "type: volume\nname: data\nbackend: k8s\nsize: 1GB\n", http.StatusBadRequest, "configuration.backend", "volume data", `no backend "k8s"`)
	if _, err := claim(t, c, data.Claim); err != nil {
		t.Fatalf("main's claim after other's refusals: %v", err)
	}
}
