package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// Version is this backend's own version, for `gpud backend list`.
const Version = "0.1.0"

// Backend runs gpud's jobs as pods of one namespace.
type Backend struct {
	cfg Config
	cs  kubernetes.Interface
}

var _ plugins.Backend = (*Backend)(nil)

// New checks cfg without reaching the cluster (a missing or unreadable
// kubeconfig fails here, naming it) and returns the backend; Check is
// the call that reaches the API server.
func New(cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cs, err := cfg.clientset()
	if err != nil {
		return nil, err
	}
	return &Backend{cfg: cfg, cs: cs}, nil
}

// Client is the backend's API client (for tests and the plugin host).
func (b *Backend) Client() kubernetes.Interface { return b.cs }

// Namespace is where the backend creates its objects.
func (b *Backend) Namespace() string { return b.cfg.Namespace }

// Info implements plugins.Backend.
func (b *Backend) Info(context.Context) (plugins.Info, error) {
	return plugins.Info{Type: "kubernetes", Protocol: plugins.ProtocolVersion, Jobs: true, Volumes: true, Version: Version, Features: b.features()}, nil
}

// features are the job fields this backend honours (plugins.Info):
// shm_size always (an emptyDir of medium Memory at /dev/shm), ports and
// services always, privileged
// only where the configuration allows it (allow_privileged).
func (b *Backend) features() []string {
	// ports and service: a Service object for the ports, and DialPort
	// through the API server's pod port-forward (dial.go).
	f := []string{plugins.FeatureShmSize, plugins.FeaturePorts, plugins.FeatureService}
	if b.cfg.AllowPrivileged {
		f = append(f, plugins.FeaturePrivileged)
	}
	return f
}

func (b *Backend) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, time.Duration(b.cfg.TimeoutSeconds)*time.Second)
}

// Check reaches the API server and makes sure the namespace exists,
// creating it when it is missing.
func (b *Backend) Check(ctx context.Context) error {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	host := "the API server"
	if rc, err := b.cfg.restConfig(); err == nil {
		host = rc.Host
	}
	var v version.Info
	raw, err := b.cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err == nil {
		err = json.Unmarshal(raw, &v)
	}
	switch {
	case err == nil:
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("kubernetes backend: %s refused the kubeconfig's credentials (401 Unauthorized): check its token or client certificate: %w", host, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("kubernetes backend: %s forbids the kubeconfig's user to read /version (403): %w", host, err)
	default:
		return fmt.Errorf("kubernetes backend: cannot reach %s: %w", host, err)
	}
	ns := b.cfg.Namespace
	_, err = b.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case err == nil:
	case apierrors.IsNotFound(err):
		_, err = b.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "gpud"},
		}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubernetes backend: namespace %q does not exist on %s (Kubernetes %s) and cannot be created: %w", ns, host, v.GitVersion, err)
		}
	case apierrors.IsForbidden(err):
		// A namespaced role may not read namespaces: try what the
		// backend needs, listing pods there.
		if _, perr := b.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1}); perr != nil {
			return fmt.Errorf("kubernetes backend: %s (Kubernetes %s) refuses namespace %q: %w", host, v.GitVersion, ns, perr)
		}
	default:
		return fmt.Errorf("kubernetes backend: namespace %q on %s: %w", ns, host, err)
	}
	return nil
}

// Offers implements plugins.Backend: one offer per schedulable node with
// what it can still give (allocatable less the requests of the pods on
// it that have not finished).
func (b *Backend) Offers(ctx context.Context, q plugins.OfferQuery) ([]api.Offer, error) {
	if q.Spot != nil && *q.Spot {
		return nil, nil // the nodes of a cluster are not spot offers gpud can ask for
	}
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	nodes, err := b.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: list nodes: %w", err)
	}
	pods, err := b.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.phase!=Succeeded,status.phase!=Failed"})
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: list pods: %w", err)
	}
	used := map[string]corev1.ResourceList{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			continue
		}
		u := used[p.Spec.NodeName]
		if u == nil {
			u = corev1.ResourceList{}
			used[p.Spec.NodeName] = u
		}
		for _, c := range p.Spec.Containers {
			for name, qty := range c.Resources.Requests {
				cur := u[name]
				cur.Add(qty)
				u[name] = cur
			}
		}
	}
	var out []api.Offer
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable || !nodeReady(n) {
			continue
		}
		o := b.nodeOffer(n, used[n.Name])
		if q.GPUs > 0 && o.Resources.GPUs < float64(q.GPUs) {
			continue
		}
		if q.GPUName != "" && !gpuNameMatches(o.Resources.GPUName, q.GPUName) {
			continue
		}
		if q.Region != "" && o.Region != q.Region {
			continue
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b api.Offer) int {
		if a.Resources.GPUs != b.Resources.GPUs {
			if a.Resources.GPUs > b.Resources.GPUs {
				return -1
			}
			return 1
		}
		return compareStrings(a.Instance, b.Instance)
	})
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (b *Backend) nodeOffer(n corev1.Node, used corev1.ResourceList) api.Offer {
	free := func(name corev1.ResourceName) resource.Quantity {
		q := n.Status.Allocatable[name].DeepCopy()
		if u, ok := used[name]; ok {
			q.Sub(u)
		}
		if q.Sign() < 0 {
			return resource.Quantity{}
		}
		return q
	}
	r := api.InstanceResources{}
	for _, gpu := range []corev1.ResourceName{"nvidia.com/gpu", "amd.com/gpu"} {
		if total, ok := n.Status.Allocatable[gpu]; ok && !total.IsZero() {
			q := free(gpu)
			r.GPUs = float64(q.Value())
			break
		}
	}
	product := n.Labels["nvidia.com/gpu.product"]
	if product == "" {
		product = n.Labels["amd.com/gpu.product-name"]
	}
	r.GPUName = gpuModel(product)
	// GPU feature discovery labels device memory in MiB.
	if mib, err := strconv.ParseInt(n.Labels["nvidia.com/gpu.memory"], 10, 64); err == nil {
		r.GPUMemory = api.Size(mib) * api.MB
	}
	cpu := free(corev1.ResourceCPU)
	r.CPUs = float64(cpu.MilliValue()) / 1000
	mem := free(corev1.ResourceMemory)
	r.Memory = api.Size(mem.Value())
	disk := free(corev1.ResourceEphemeralStorage)
	r.Disk = api.Size(disk.Value())
	avail := "available"
	if r.GPUs == 0 && n.Status.Allocatable.Name("nvidia.com/gpu", resource.DecimalSI).Value()+n.Status.Allocatable.Name("amd.com/gpu", resource.DecimalSI).Value() > 0 {
		avail = "busy"
	}
	region := b.cfg.Region
	if region == "" {
		region = n.Labels["topology.kubernetes.io/region"]
	}
	return api.Offer{Backend: "kubernetes", Instance: n.Name, Resources: r, Available: avail, Region: region}
}

// gpuNameMatches compares an offer's model (H100) with the names a
// query asks for, comma-separated, each a model or a product name
// ("H100", "NVIDIA H100 80GB HBM3").
func gpuNameMatches(model, want string) bool {
	for _, w := range strings.Split(want, ",") {
		if m := gpuModel(w); m != "" && m == gpuModel(model) {
			return true
		}
	}
	return false
}

// CreateInstance implements plugins.Backend: a job backend makes no
// machines.
func (b *Backend) CreateInstance(context.Context, plugins.InstanceRequest) (plugins.Instance, error) {
	return plugins.Instance{}, plugins.ErrUnsupported
}

// TerminateInstance implements plugins.Backend.
func (b *Backend) TerminateInstance(context.Context, string) error { return plugins.ErrUnsupported }
