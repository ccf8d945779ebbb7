package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// startServerToRestart starts a server like startServerWith, but its stop
// closes it without stopping its runs, as a restart does; a later
// startServerWith on the same DataDir adopts them (and stops them at the
// test's end).
func startServerToRestart(t *testing.T, opts Options) (ts *testServer, stop func()) {
	t.Helper()
	opts.Listen = "127.0.0.1:0"
	opts.ResyncInterval = 2 * time.Second
	srv, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return &testServer{Server: srv, t: t, admin: srv.AdminToken()}, stop
}

// gatewayClient reaches every host at addr (the gateway's listener), over
// TLS trusting only rootPEM, and does not follow redirects.
func gatewayClient(t *testing.T, rootPEM []byte, addr string) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if rootPEM != nil && !pool.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("no certificate in %q", rootPEM)
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			},
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// gatewayGet GETs url until the service answers 200 (its replica may still
// be starting, or being adopted after a restart) and returns the body and
// the certificate the gateway presented (nil over plain HTTP).
func gatewayGet(t *testing.T, cl *http.Client, url string) (string, *x509.Certificate) {
	t.Helper()
	var body string
	var leaf *x509.Certificate
	testutil.Eventually(t, 60*time.Second, func() error {
		resp, err := cl.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s %s", url, resp.Status, b)
		}
		body, leaf = string(b), nil
		if resp.TLS != nil {
			leaf = resp.TLS.PeerCertificates[0]
		}
		return nil
	})
	return body, leaf
}

// noCertificateFor fails the test if a TLS handshake at addr for SNI name
// gets any certificate.
func noCertificateFor(t *testing.T, addr, name string) {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", addr,
		&tls.Config{ServerName: name, InsecureSkipVerify: true}) //nolint:gosec // any certificate at all is the failure
	if err == nil {
		names := conn.ConnectionState().PeerCertificates[0].DNSNames
		_ = conn.Close()
		t.Fatalf("a handshake for %s got a certificate for %v", name, names)
	}
}

func applyGateway(ts *testServer, project, yaml string) (int, api.ServerError, api.Gateway) {
	ts.t.Helper()
	var g api.Gateway
	status, se := ts.call(ts.admin, "POST", "/api/v1/projects/"+project+"/gateways/apply", api.ApplyRequest{ConfigurationYAML: yaml, Filename: "gateway.yml"}, &g)
	return status, se, g
}

// TestGatewayServesServiceOverHTTPSWithACertificateFromPebble: with
// `gpud serve --domain gpud.test` and Debian's pebble as the ACME CA (real
// HTTP-01/TLS-ALPN-01 validation against the server's own listeners), a
// service replica (process runtime) answers at https://svc.gpud.test with
// a certificate chaining to pebble's root; a handshake for an unknown SNI
// gets none and makes no order; plain HTTP redirects; after a restart the
// same certificate is served with no new order; a project's default
// gateway moves its services to that gateway's domain.
func TestGatewayServesServiceOverHTTPSWithACertificateFromPebble(t *testing.T) {
	httpPort, httpsPort := testutil.FreePort(t), testutil.FreePort(t)
	httpsAddr := fmt.Sprintf("127.0.0.1:%d", httpsPort)
	pb := testutil.StartPebble(t, httpPort, httpsPort)
	opts := Options{Runtime: "process", DataDir: t.TempDir(), Domain: "gpud.test",
		HTTPSListen: httpsAddr, HTTPListen: fmt.Sprintf("127.0.0.1:%d", httpPort),
		ACMECA: pb.Directory, ACMECARoot: pb.ListenerCAFile, ACMEEmail: "ops@gpud.test"}
	first, restart := startServerToRestart(t, opts)
	first.submit(serviceConfig(t, "svc", freeLoopbackPort(t), "auth: false\ngateway: true\n"))
	first.waitRun("svc", "running", "", 60*time.Second)

	cl := gatewayClient(t, pb.Root(t), httpsAddr)
	body, leaf := gatewayGet(t, cl, "https://svc.gpud.test/hello")
	if strings.TrimSpace(body) != "path=/hello auth=" || leaf.DNSNames[0] != "svc.gpud.test" {
		t.Fatalf("https://svc.gpud.test/hello: %q, certificate for %v", body, leaf.DNSNames)
	}
	if pb.Orders() != 1 {
		t.Fatalf("pebble took %d orders, want 1", pb.Orders())
	}

	// Names the server does not know get no certificate and no order.
	noCertificateFor(t, httpsAddr, "nobody.gpud.test")
	noCertificateFor(t, httpsAddr, "svc.elsewhere.test")
	if pb.Orders() != 1 || first.GatewayTLSStats().Refused < 2 {
		t.Fatalf("unknown names: pebble has %d orders (want 1), stats %+v", pb.Orders(), first.GatewayTLSStats())
	}

	// The API is served over HTTPS at the server's domain; plain HTTP
	// redirects to HTTPS.
	if body, _ := gatewayGet(t, cl, "https://gpud.test/api/v1/healthz"); !strings.Contains(body, `"ok"`) {
		t.Fatalf("API over HTTPS: %q", body)
	}
	resp, err := gatewayClient(t, nil, opts.HTTPListen).Get("http://svc.gpud.test/a?b=c")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if want := "https://svc.gpud.test:" + fmt.Sprint(httpsPort) + "/a?b=c"; resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != want {
		t.Fatalf("port 80: %s to %q, want 308 to %s", resp.Status, resp.Header.Get("Location"), want)
	}
	orders := pb.Orders()

	// A restart serves the certificate it stored, without a new order.
	restart()
	second := startServerWith(t, opts)
	second.admin = first.admin
	_, again := gatewayGet(t, gatewayClient(t, pb.Root(t), httpsAddr), "https://svc.gpud.test/again")
	if again.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Fatalf("after a restart the serial is %s, before %s", again.SerialNumber, leaf.SerialNumber)
	}
	if pb.Orders() != orders || second.GatewayTLSStats().Obtaining != 0 {
		t.Fatalf("the restart ordered again: pebble %d orders (was %d), stats %+v", pb.Orders(), orders, second.GatewayTLSStats())
	}

	// A default gateway of the project moves its services to its domain.
	status, se, g := applyGateway(second, "main", "type: gateway\nname: apps\ndomain: apps.gpud.example\ndefault: true\npublic_ip: true\n")
	if status != http.StatusOK || !g.Listening || g.ServiceURL != "https://<run>.apps.gpud.example" {
		t.Fatalf("apply gateway: %d %s %+v", status, se.Error(), g)
	}
	body, leaf = gatewayGet(t, gatewayClient(t, pb.Root(t), httpsAddr), "https://svc.apps.gpud.example/x")
	if strings.TrimSpace(body) != "path=/x auth=" || leaf.DNSNames[0] != "svc.apps.gpud.example" {
		t.Fatalf("through the default gateway: %q, certificate for %v", body, leaf.DNSNames)
	}
}

// TestGatewayInternalCAServesHTTPSWithoutAnACMEServer is the air-gapped
// mode (gpud serve --tls internal): the server's own CA, kept in its state
// file and published at /api/v1/gateway/ca.pem and DATA_DIR/gateway-ca.pem,
// issues the service's certificate; unknown names get none.
func TestGatewayInternalCAServesHTTPSWithoutAnACMEServer(t *testing.T) {
	ts := startServerWith(t, Options{Runtime: "process", Domain: "gpud.test", GatewayTLS: GatewayTLSInternal,
		HTTPSListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"})
	ts.submit(serviceConfig(t, "svc", freeLoopbackPort(t), "auth: false\n"))
	ts.waitRun("svc", "running", "", 60*time.Second)
	resp, err := http.Get(ts.URL() + "/api/v1/gateway/ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(ca) != string(ts.GatewayCACertPEM()) {
		t.Fatalf("ca.pem: %d %v %q", resp.StatusCode, err, ca)
	}
	body, leaf := gatewayGet(t, gatewayClient(t, ca, ts.GatewayHTTPSAddr()), "https://svc.gpud.test/p")
	if strings.TrimSpace(body) != "path=/p auth=" || leaf.DNSNames[0] != "svc.gpud.test" {
		t.Fatalf("%q, certificate for %v", body, leaf.DNSNames)
	}
	noCertificateFor(t, ts.GatewayHTTPSAddr(), "other.gpud.test")
}

// TestGatewayWithoutCertificateServesPlainHTTP: a gateway with
// certificate: none serves its services over plain HTTP on the HTTP
// listener (no redirect) and never gets them a certificate (https: auto
// follows the gateway); a service with https: false on a gateway with
// certificates is served the same way.
func TestGatewayWithoutCertificateServesPlainHTTP(t *testing.T) {
	ts := startServerWith(t, Options{Runtime: "process", Domain: "gpud.test", GatewayTLS: GatewayTLSInternal,
		HTTPSListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"})
	if status, se, g := applyGateway(ts, "main", "type: gateway\nname: plain\ndomain: plain.example\ncertificate:\n  type: none\n"); status != http.StatusOK || g.Certificate != "none" || g.ServiceURL != "http://<run>.plain.example" {
		t.Fatalf("apply: %d %s %+v", status, se.Error(), g)
	}
	ts.submit(serviceConfig(t, "web", freeLoopbackPort(t), "auth: false\ngateway: plain\nhttps: auto\n"))
	ts.submit(serviceConfig(t, "nohttps", freeLoopbackPort(t), "auth: false\nhttps: false\n"))
	ts.waitRun("web", "running", "", 60*time.Second)
	ts.waitRun("nohttps", "running", "", 60*time.Second)
	plain := gatewayClient(t, nil, ts.GatewayHTTPAddr())
	if body, _ := gatewayGet(t, plain, "http://web.plain.example/w"); strings.TrimSpace(body) != "path=/w auth=" {
		t.Fatalf("plain gateway: %q", body)
	}
	if body, _ := gatewayGet(t, plain, "http://nohttps.gpud.test/n"); strings.TrimSpace(body) != "path=/n auth=" {
		t.Fatalf("https: false: %q", body)
	}
	noCertificateFor(t, ts.GatewayHTTPSAddr(), "web.plain.example")
	noCertificateFor(t, ts.GatewayHTTPSAddr(), "nohttps.gpud.test")
}
