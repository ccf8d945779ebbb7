package kubernetes

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// DialPort implements plugins.PortDialer through the API server's pod
// port-forward subresource (pods/portforward, over SPDY, as kubectl
// port-forward): the connection goes server → API server → kubelet →
// the pod's network namespace, so the gateway reaches a replica without
// a route to pod IPs and without a Service of type LoadBalancer. The
// backend's role needs create on pods/portforward (docs/backends.md).
// Only a running pod of a job of this server is dialed.
func (b *Backend) DialPort(ctx context.Context, job string, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("kubernetes backend: job %s: no port %d", job, port)
	}
	ns := b.cfg.Namespace
	lctx, cancel := b.callCtx(ctx)
	pods, err := b.cs.CoreV1().Pods(ns).List(lctx, metav1.ListOptions{LabelSelector: labelJob + "=" + labelValue(job) + "," + labelServer + "=" + b.cfg.ServerID})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: dial job %s: %w", job, err)
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].Annotations[annJobID] == job {
			pod = &pods.Items[i]
		}
	}
	if pod == nil || pod.Status.Phase != corev1.PodRunning {
		return nil, fmt.Errorf("kubernetes backend: dial job %s: no running pod", job)
	}
	rc, err := b.cfg.restConfig()
	if err != nil {
		return nil, err
	}
	rt, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: dial job %s: %w", job, err)
	}
	url := b.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod.Name).SubResource("portforward").URL()
	sc, _, err := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, url).Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: port-forward to pod %s: %w", pod.Name, err)
	}
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(port))
	h.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := sc.CreateStream(h)
	if err != nil {
		sc.Close()
		return nil, fmt.Errorf("kubernetes backend: port-forward to pod %s: %w", pod.Name, err)
	}
	_ = errStream.Close() // nothing to send on it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := sc.CreateStream(h)
	if err != nil {
		sc.Close()
		return nil, fmt.Errorf("kubernetes backend: port-forward to pod %s: %w", pod.Name, err)
	}
	mine, theirs := net.Pipe()
	var once sync.Once
	done := func() { once.Do(func() { _ = theirs.Close(); _ = data.Reset(); _ = sc.Close() }) }
	go func() {
		// The kubelet's error for the port (nothing listens there) ends it.
		if msg, _ := io.ReadAll(errStream); len(msg) > 0 {
			done()
		}
	}()
	go func() { _, _ = io.Copy(theirs, data); done() }()
	go func() { _, _ = io.Copy(data, theirs); done() }()
	return mine, nil
}
