package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// TestGatewayHostCacheFollowsTheStore: the answer of which service a host
// reaches is remembered, and a change of the run (stopped) or of the
// project's gateways (a default with its own domain) is seen at once,
// not after some time.
func TestGatewayHostCacheFollowsTheStore(t *testing.T) {
	ts := startServerWith(t, Options{NoLocalAgent: true, Domain: "gpud.test", GatewayTLS: GatewayTLSInternal,
		HTTPSListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"})
	ts.submit(serviceConfig(t, "svc", 1, "auth: false\n"))
	lookup := func(host string, want int) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, func() error {
			if status, _ := ts.call(ts.admin, "GET", "/api/v1/gateway/hosts/"+host, nil, nil); status != want {
				return fmt.Errorf("%s: %d, want %d", host, status, want)
			}
			return nil
		})
	}
	lookup("svc.gpud.test", http.StatusOK)
	lookup("svc.apps.gpud.example", http.StatusNotFound)
	if status, se, _ := applyGateway(ts, "main", "type: gateway\nname: apps\ndomain: apps.gpud.example\ndefault: true\n"); status != http.StatusOK {
		t.Fatalf("apply: %d %s", status, se.Error())
	}
	lookup("svc.apps.gpud.example", http.StatusOK)
	lookup("svc.gpud.test", http.StatusNotFound)
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/svc/stop", map[string]any{"abort": true}, nil)
	lookup("svc.apps.gpud.example", http.StatusNotFound)
}

// BenchmarkGatewayHostLookup measures what the gateway pays per request
// and per handshake to find the service of a host, in a project with 1000
// finished runs beside the service: the lookup itself (a scan of the
// project's runs) and the cached answer the listeners use.
func BenchmarkGatewayHostLookup(b *testing.B) {
	ts := startServerWith(b, Options{NoLocalAgent: true, Domain: "gpud.test", GatewayTLS: GatewayTLSInternal,
		HTTPSListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"})
	var muts []store.Mutation
	for i := range 1000 {
		muts = append(muts, store.Put(store.Record{Kind: store.KindRun, ID: fmt.Sprintf("old-%d", i), Project: DefaultProject,
			Name: fmt.Sprintf("old-%d", i), Status: store.RunDone}))
	}
	if _, err := ts.store.Apply(context.Background(), muts...); err != nil {
		b.Fatal(err)
	}
	ts.submit(fmt.Sprintf("type: service\nname: svc\nport: 8000\nauth: false\ncommands: [sleep infinity]\n"))
	if _, _, ok := ts.serviceAtHost("svc.gpud.test"); !ok {
		b.Fatal("svc.gpud.test reaches no service")
	}
	b.Run("uncached", func(b *testing.B) {
		for b.Loop() {
			ts.serviceAtHost("svc.gpud.test")
		}
	})
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			ts.hostAt("svc.gpud.test")
		}
	})
}

// TestGatewayDomainIsOneHostnameLowerCase: --domain is compared as hosts
// are (lower case, no final dot), and one that is no hostname stops the
// start with the reason.
func TestGatewayDomainIsOneHostnameLowerCase(t *testing.T) {
	ts := startServerWith(t, Options{NoLocalAgent: true, Domain: "GPUD.Test.", GatewayTLS: GatewayTLSInternal,
		HTTPSListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"})
	ts.submit(serviceConfig(t, "svc", 1, "auth: false\n"))
	if status, _ := ts.call(ts.admin, "GET", "/api/v1/gateway/hosts/svc.gpud.test", nil, nil); status != http.StatusOK {
		t.Fatalf("svc.gpud.test under --domain GPUD.Test.: %d", status)
	}
	_, err := New(context.Background(), Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NoLocalAgent: true, Domain: "not a host",
		HTTPSListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", GatewayTLS: GatewayTLSInternal})
	if err == nil || !strings.Contains(err.Error(), "is not a hostname") {
		t.Fatalf("start with --domain 'not a host': %v", err)
	}
}
