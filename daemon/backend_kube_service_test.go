package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/kubetest"
	"gpud.dev/gpud/internal/testutil"
)

// TestKubernetesServiceGetsAServiceAndTheGatewayReachesIt: issue 17's "a
// service gets a Service" through `gpud serve`: a service submitted to a
// server whose only capacity is the Kubernetes backend becomes a pod and
// a Service object (ClusterIP) with the service's port, selecting the
// gang's pods; the gateway's /proxy/services reaches the replica through
// the backend's DialPort, the real API server's pods/portforward. KWOK's
// pods run nothing: the test cluster's KWOK forwards the pods' port 8000
// to a loopback HTTP server of the test, standing in for the container.
// Stopping the run deletes the pod and the Service.
func TestKubernetesServiceGetsAServiceAndTheGatewayReachesIt(t *testing.T) {
	replica := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "replica path=%s\n", r.URL.Path)
	}))
	defer replica.Close()
	ts, c := kubeServerOn(t, kubetest.Options{ForwardPort: 8000, ForwardTo: strings.TrimPrefix(replica.URL, "http://")}, nil)
	ts.submit("type: service\nname: web\nport: 8000\nimage: busybox\nauth: false\nstrip_prefix: false\ncommands:\n  - httpd -f -p 8000\nresources:\n  gpu: H100:1\n")
	r := ts.waitRun("web", "running", "", 2*time.Minute)
	if len(r.Jobs) != 1 || !strings.HasPrefix(r.Jobs[0].Instance, backendNodePrefix+"main/k8s/") {
		t.Fatalf("the service's replica is not on backend k8s: %+v", r.Jobs)
	}
	pods := gangPods(t, c)
	if len(pods) != 1 {
		t.Fatalf("%d pods", len(pods))
	}
	svcs, err := c.Client.CoreV1().Services("gpud").List(context.Background(), metav1.ListOptions{LabelSelector: "gpud.dev/gang"})
	if err != nil {
		t.Fatal(err)
	}
	var svc *corev1.Service
	for i := range svcs.Items {
		if svcs.Items[i].Spec.ClusterIP != corev1.ClusterIPNone {
			svc = &svcs.Items[i]
		}
	}
	if svc == nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8000 || svc.Spec.Ports[0].TargetPort.IntValue() != 8000 {
		t.Fatalf("the service's Service: %+v", svcs.Items)
	}
	for k, v := range svc.Spec.Selector {
		if pods[0].Labels[k] != v {
			t.Fatalf("the Service's selector %v does not select the replica's pod (labels %v)", svc.Spec.Selector, pods[0].Labels)
		}
	}
	if svc.Spec.Selector["gpud.dev/gang"] == "" {
		t.Fatalf("the Service's selector %v does not name the gang", svc.Spec.Selector)
	}
	testutil.Eventually(t, time.Minute, func() error {
		code, body := ts.proxyGet("/proxy/services/main/web/hello", "")
		if code != http.StatusOK || !strings.Contains(body, "replica path=/proxy/services/main/web/hello") {
			return fmt.Errorf("GET through the gateway: %d %q", code, body)
		}
		return nil
	})
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/web/stop", api.StopRunRequest{}, nil)
	ts.waitRun("web", "terminated", "", 2*time.Minute)
	testutil.Eventually(t, time.Minute, func() error { return gangLeft(c) })
}
