package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/proxy"
)

// startStandaloneGateway runs `gpud gateway --server` in-process: a
// standalone gateway with its internal CA for the server's services that
// token's projects hold.
func startStandaloneGateway(t *testing.T, ts *testServer, token string) *proxy.Standalone {
	t.Helper()
	cl, err := api.NewClient(ts.URL(), token, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g, err := proxy.NewStandalone(ctx, proxy.StandaloneOptions{Server: cl, HTTPSListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Source: proxy.CertInternal, Storage: &certmagic.FileStorage{Path: t.TempDir()}, HostTTL: 100 * time.Millisecond, Log: zerolog.Nop()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("standalone gateway: %v", err)
		}
	})
	return g
}

// TestStandaloneGatewayServesTheServersServicesOverHTTPS is `gpud gateway
// --server URL` on another host: a server without listeners of its own
// (--external-gateway) keeps a project's gateway domain; the standalone
// gateway asks it which service a host reaches, gets the certificate
// (its internal CA here; ACME is the same manager as the server's) and
// forwards the request to the server, the caller's own token with it. A
// gateway holding a token of another project serves none of this
// project's hosts, and the host lookup tells that token nothing.
func TestStandaloneGatewayServesTheServersServicesOverHTTPS(t *testing.T) {
	ts := startServerWith(t, Options{Runtime: "process", ExternalGateway: true})
	if status, se, g := applyGateway(ts, "main", "type: gateway\nname: apps\ndomain: apps.gpud.test\ndefault: true\n"); status != http.StatusOK || !g.Listening {
		t.Fatalf("apply: %d %s %+v", status, se.Error(), g)
	}
	ts.submit(serviceConfig(t, "open", freeLoopbackPort(t), "auth: false\ngateway: true\n"))
	ts.submit(serviceConfig(t, "closed", freeLoopbackPort(t), "gateway: apps\n"))
	ts.waitRun("open", "running", "", 60*time.Second)
	ts.waitRun("closed", "running", "", 60*time.Second)

	g := startStandaloneGateway(t, ts, ts.admin)
	cl := gatewayClient(t, g.CACertPEM(), g.HTTPSAddr())
	body, leaf := gatewayGet(t, cl, "https://open.apps.gpud.test/x?y=1")
	if strings.TrimSpace(body) != "path=/x auth=" || leaf.DNSNames[0] != "open.apps.gpud.test" {
		t.Fatalf("open service: %q, certificate for %v", body, leaf.DNSNames)
	}
	// auth: true: the caller's own token decides, as on the server.
	resp, err := cl.Get("https://closed.apps.gpud.test/c")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a service with auth answered through the gateway without a token: %s", resp.Status)
	}
	// The replica may still be starting to listen (running is not
	// listening; a service without probes is not waited for): a 503
	// until it does, then the token decides.
	var status int
	testutil.Eventually(t, 60*time.Second, func() error {
		req, err := http.NewRequest("GET", "https://closed.apps.gpud.test/c", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+ts.admin)
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if status = resp.StatusCode; status == http.StatusServiceUnavailable {
			return fmt.Errorf("with a member's token: %s", resp.Status)
		}
		return nil
	})
	if status != http.StatusOK {
		t.Fatalf("with a member's token: %d", status)
	}
	noCertificateFor(t, g.HTTPSAddr(), "nobody.apps.gpud.test")

	// Another project's token: its gateway serves none of main's hosts,
	// and the lookup answers 404 as for a host that does not exist.
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	bob := ts.user("bob")
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/other/members/bob", api.SetMemberRequest{Role: api.RoleManager}, nil)
	if status, _ := ts.call(bob, "GET", "/api/v1/gateway/hosts/open.apps.gpud.test", nil, nil); status != http.StatusNotFound {
		t.Fatalf("another project's member looked up main's host: %d", status)
	}
	var h api.GatewayHost
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/gateway/hosts/open.apps.gpud.test", nil, &h)
	if h.Project != "main" || h.Run != "open" || h.Plain {
		t.Fatalf("lookup: %+v", h)
	}
	other := startStandaloneGateway(t, ts, bob)
	noCertificateFor(t, other.HTTPSAddr(), "open.apps.gpud.test")
}

// TestStandaloneGatewayGetsItsCertificateFromPebble: the standalone
// gateway's ACME path against Debian's pebble, with pebble validating on
// the gateway's own listeners: the certificate chains to pebble's root and
// one order is made; an unknown host makes none.
func TestStandaloneGatewayGetsItsCertificateFromPebble(t *testing.T) {
	httpPort, httpsPort := testutil.FreePort(t), testutil.FreePort(t)
	pb := testutil.StartPebble(t, httpPort, httpsPort)
	ts := startServerWith(t, Options{Runtime: "process", ExternalGateway: true})
	if status, se, _ := applyGateway(ts, "main", "type: gateway\nname: apps\ndomain: apps.gpud.test\ndefault: true\n"); status != http.StatusOK {
		t.Fatalf("apply: %d %s", status, se.Error())
	}
	ts.submit(serviceConfig(t, "open", freeLoopbackPort(t), "auth: false\n"))
	ts.waitRun("open", "running", "", 60*time.Second)

	cl, err := api.NewClient(ts.URL(), ts.admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pb.ListenerCAPEM)
	ctx, cancel := context.WithCancel(context.Background())
	g, err := proxy.NewStandalone(ctx, proxy.StandaloneOptions{Server: cl,
		HTTPSListen: fmt.Sprintf("127.0.0.1:%d", httpsPort), HTTPListen: fmt.Sprintf("127.0.0.1:%d", httpPort),
		Source: proxy.CertACME, CA: pb.Directory, CARoots: roots, Storage: &certmagic.FileStorage{Path: t.TempDir()}, Log: zerolog.Nop()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	body, leaf := gatewayGet(t, gatewayClient(t, pb.Root(t), g.HTTPSAddr()), "https://open.apps.gpud.test/p")
	if strings.TrimSpace(body) != "path=/p auth=" || leaf.DNSNames[0] != "open.apps.gpud.test" || pb.Orders() != 1 {
		t.Fatalf("%q, certificate for %v, %d orders", body, leaf.DNSNames, pb.Orders())
	}
	noCertificateFor(t, g.HTTPSAddr(), "other.apps.gpud.test")
	if pb.Orders() != 1 {
		t.Fatalf("an unknown host made an order: %d", pb.Orders())
	}
}
