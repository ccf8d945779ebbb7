package kubernetes

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/kubetest"
	"gpud.dev/gpud/plugins"
)

// TestDialPortGoesThroughTheAPIServersPortForward: the backend advertises
// ports and service, and DialPort's bytes go through the real API
// server's pods/portforward (SPDY) to the pod's port as the node serves
// it. KWOK's pods are not containers: the test cluster's KWOK forwards
// every pod's port 8000 to a loopback echo server of the test, standing
// in for the container's process, so what is shown is the whole path a
// real cluster takes but the last hop (kubelet into the pod's network
// namespace). A job without a running pod, and port 0, are refused.
func TestDialPortGoesThroughTheAPIServersPortForward(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, strings.ToUpper(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	c := kubetest.StartWithT(t, kubetest.Options{ForwardPort: 8000, ForwardTo: ln.Addr().String()})
	b, err := New(Config{Kubeconfig: c.Kubeconfig, Namespace: "fwd"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := b.Info(ctx)
	if err != nil || !info.Supports(plugins.FeatureService) || !info.Supports(plugins.FeaturePorts) {
		t.Fatalf("features %v %v", info.Features, err)
	}
	if _, err := b.DialPort(ctx, "nobody-0", 8000); err == nil || !strings.Contains(err.Error(), "no running pod") {
		t.Fatalf("dial of a job without a pod: %v", err)
	}
	j := job("fwd-0", 1, "sleep infinity")
	j.Ports = []api.JobPort{{Container: 8000}}
	g := plugins.Gang{ID: "fwd", Service: true, Jobs: []api.JobSpec{j}}
	if err := b.StartGang(ctx, g); err != nil {
		t.Fatal(err)
	}
	waitStates(t, b, g.ID, 1, api.JobRunning)
	if _, err := b.DialPort(ctx, "fwd-0", 0); err == nil || !strings.Contains(err.Error(), "no port 0") {
		t.Fatalf("dial of port 0: %v", err)
	}
	conn, err := b.DialPort(ctx, "fwd-0", 8000)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	for _, msg := range []string{"hello\n", strings.Repeat("y", 64<<10) + "\n"} {
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got, err := r.ReadString('\n')
		if err != nil || got != strings.ToUpper(msg) {
			t.Fatalf("echo through port-forward of %d bytes: %d bytes %v", len(msg), len(got), err)
		}
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx, g.ID, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, b, g.ID)
}
