package kubetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"embed"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ManagedAnnotation marks the nodes KWOK manages (value "fake").
const ManagedAnnotation = "kwok.x-k8s.io/node"

// ExitCodeLabel finishes a Running pod through the gpud-pod-finish stage
// with the label's value as its exit code; ReasonAnnotation sets the
// container's terminated reason (OOMKilled).
const (
	ExitCodeLabel    = "kwok.gpud.dev/exit-code"
	ReasonAnnotation = "kwok.gpud.dev/reason"
)

// The stages KWOK plays: node-initialize, pod-ready and pod-delete are
// KWOK's own "fast" stages (sigs.k8s.io/kwok v0.8.0,
// kustomize/stage/{node,pod}/fast, Apache-2.0), copied unchanged because
// the kwok binary, unlike kwokctl, plays only the stages it is given;
// pod-finish is gpud's.
//
//go:embed stages/*.yaml
var stages embed.FS

func writeKwokConfig(path string, opts Options) error {
	logsFile := opts.LogsFile
	var b strings.Builder
	for _, name := range []string{"node-initialize", "pod-ready", "pod-delete", "pod-finish"} {
		data, err := stages.ReadFile("stages/" + name + ".yaml")
		if err != nil {
			return err
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	if logsFile != "" {
		fmt.Fprintf(&b, `---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: all-pods
spec:
  selector: {}
  logs:
  - logsFile: %q
    follow: false
`, logsFile)
	}
	if opts.ForwardTo != "" {
		host, port, err := net.SplitHostPort(opts.ForwardTo)
		if err != nil {
			return fmt.Errorf("kubetest: ForwardTo %q: %w", opts.ForwardTo, err)
		}
		fmt.Fprintf(&b, `---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterPortForward
metadata:
  name: all-pods
spec:
  forwards:
  - ports: [%d]
    target: {port: %s, address: %q}
`, opts.ForwardPort, port, host)
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

func httpsClient(caPEM []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("kubetest: bad CA")
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, nil
}

func writeKubeconfig(path, host string, caPEM []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "admin"}
	cfg.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*cfg, path)
}

// GPUNode describes a fake node.
type GPUNode struct {
	Name    string
	GPUs    int    // nvidia.com/gpu
	Product string // nvidia.com/gpu.product; default NVIDIA-H100-80GB-HBM3
	// MemoryMiB is nvidia.com/gpu.memory; default 81559.
	MemoryMiB int
}

// AddGPUNode creates a node KWOK manages, with GPUs as nvidia.com/gpu
// capacity, 64 CPUs, 512Gi of memory and 1Ti of ephemeral storage, and
// waits until it is Ready.
func (c *Cluster) AddGPUNode(ctx context.Context, n GPUNode) error {
	if n.Product == "" {
		n.Product = "NVIDIA-H100-80GB-HBM3"
	}
	if n.MemoryMiB == 0 {
		n.MemoryMiB = 81559
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("64"),
		corev1.ResourceMemory:           resource.MustParse("512Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
		corev1.ResourcePods:             resource.MustParse("110"),
		"nvidia.com/gpu":                *resource.NewQuantity(int64(n.GPUs), resource.DecimalSI),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        n.Name,
			Annotations: map[string]string{ManagedAnnotation: "fake"},
			Labels: map[string]string{
				"kubernetes.io/hostname": n.Name, "type": "kwok",
				"nvidia.com/gpu.product": n.Product,
				"nvidia.com/gpu.memory":  fmt.Sprint(n.MemoryMiB),
				"nvidia.com/gpu.count":   fmt.Sprint(n.GPUs),
			},
		},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kubetest: create node %s: %w", n.Name, err)
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n.Name)
	c.mu.Unlock()
	for {
		got, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range got.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubetest: node %s not Ready: %w", n.Name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Finish makes KWOK end a Running pod with exit code (and, when
// reason is set, that terminated reason).
func (c *Cluster) Finish(ctx context.Context, namespace, pod string, code int, reason string) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}`, ExitCodeLabel, fmt.Sprint(code))
	if reason != "" {
		patch += fmt.Sprintf(`,"annotations":{%q:%q}`, ReasonAnnotation, reason)
	}
	patch += "}}"
	_, err := c.Client.CoreV1().Pods(namespace).Patch(ctx, pod, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
	return err
}

// bind stands in for kube-scheduler, which this cluster does not run:
// it binds every pending pod without a node to the node with the most
// GPUs left that fits its GPU request (round robin among equals), or
// leaves it pending. It polls, bounded by ctx.
func (c *Cluster) bind(ctx context.Context) {
	for ctx.Err() == nil {
		c.bindOnce(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) bindOnce(ctx context.Context) {
	c.mu.Lock()
	nodes := append([]string(nil), c.nodes...)
	c.mu.Unlock()
	if len(nodes) == 0 {
		return
	}
	pending, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", "").String()})
	if err != nil || len(pending.Items) == 0 {
		return
	}
	all, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.phase!=Succeeded,status.phase!=Failed"})
	if err != nil {
		return
	}
	free := map[string]int64{}
	for _, name := range nodes {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return
		}
		q := n.Status.Allocatable["nvidia.com/gpu"]
		free[name] = q.Value()
	}
	for _, p := range all.Items {
		if _, ok := free[p.Spec.NodeName]; ok {
			free[p.Spec.NodeName] -= podGPUs(&p)
		}
	}
	for i := range pending.Items {
		p := &pending.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		need := podGPUs(p)
		best := ""
		for _, name := range nodes {
			if free[name] >= need && (best == "" || free[name] > free[best]) {
				best = name
			}
		}
		if best == "" {
			continue
		}
		err := c.Client.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: best},
		}, metav1.CreateOptions{})
		if err == nil {
			free[best] -= need
		}
	}
}

func podGPUs(p *corev1.Pod) int64 {
	var n int64
	for _, ctr := range p.Spec.Containers {
		q := ctr.Resources.Requests["nvidia.com/gpu"]
		n += q.Value()
	}
	return n
}
