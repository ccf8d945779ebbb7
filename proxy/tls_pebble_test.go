package proxy

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"testing"

	"github.com/caddyserver/certmagic"
	"github.com/rs/zerolog"

	"gpud.dev/gpud/internal/testutil"
)

// pebbleTLS starts a certificate manager against pb with its HTTP and
// HTTPS listeners on the ports pebble validates.
func pebbleTLS(t *testing.T, pb *testutil.Pebble, storage certmagic.Storage, httpAddr, httpsAddr string, hosts tlsTestHosts, noTLSALPN bool) (*TLS, *tlsTestServer) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pb.ListenerCAPEM)
	m, err := NewTLS(context.Background(), TLSOptions{Source: CertACME, Storage: storage,
		CA: pb.Directory, CARoots: roots, Email: "ops@gpud.test",
		HTTPAddr: httpAddr, HTTPSAddr: httpsAddr, Allow: KnownHosts(hosts), Log: zerolog.Nop(), noTLSALPN: noTLSALPN})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m, startTLSTestServer(t, m, httpsAddr, httpAddr)
}

// TestACMECertificateFromPebbleSurvivesRestartAndUnknownSNIGetsNone runs
// the whole ACME path against Debian's pebble with real validation: the
// first handshake for a known host makes one order, pebble validates the
// challenge on gpud's own listeners, and the certificate chains to
// pebble's root; a handshake for an unknown SNI gets no certificate and
// makes no order; a restart on the same storage serves the same
// certificate without a new order; plain HTTP redirects to https.
func TestACMECertificateFromPebbleSurvivesRestartAndUnknownSNIGetsNone(t *testing.T) {
	httpPort, httpsPort := testutil.FreePort(t), testutil.FreePort(t)
	httpAddr, httpsAddr := fmt.Sprintf("127.0.0.1:%d", httpPort), fmt.Sprintf("127.0.0.1:%d", httpsPort)
	pb := testutil.StartPebble(t, httpPort, httpsPort)
	storage := &certmagic.FileStorage{Path: t.TempDir()}
	hosts := tlsTestHosts{"svc.gpud.test": true}

	m, srv := pebbleTLS(t, pb, storage, httpAddr, httpsAddr, hosts, false)
	cl := tlsTestClient(t, pb.Root(t), httpsAddr)
	body, leaf := getTLS(t, cl, "https://svc.gpud.test/")
	if body != "hello from svc.gpud.test" || leaf.DNSNames[0] != "svc.gpud.test" {
		t.Fatalf("body %q, names %v", body, leaf.DNSNames)
	}
	if pb.Orders() != 1 || pb.Issued() != 1 {
		t.Fatalf("pebble: %d orders, %d issued; want 1 and 1", pb.Orders(), pb.Issued())
	}

	handshakeFails(t, httpsAddr, "unknown.gpud.test")
	if pb.Orders() != 1 || m.Stats().Refused == 0 {
		t.Fatalf("unknown SNI: pebble has %d orders (want 1), stats %+v", pb.Orders(), m.Stats())
	}

	// Port 80 redirects what is not a challenge.
	resp, err := tlsTestClient(t, pb.Root(t), httpAddr).Get("http://svc.gpud.test/a?b=c")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if want := fmt.Sprintf("https://svc.gpud.test:%d/a?b=c", httpsPort); resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != want {
		t.Fatalf("port 80 answered %s Location %q, want 308 to %s", resp.Status, resp.Header.Get("Location"), want)
	}

	srv.stop()
	m.Stop()
	m2, _ := pebbleTLS(t, pb, storage, httpAddr, httpsAddr, hosts, false)
	_, again := getTLS(t, tlsTestClient(t, pb.Root(t), httpsAddr), "https://svc.gpud.test/")
	if again.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Fatalf("serial %s after restart, %s before", again.SerialNumber, leaf.SerialNumber)
	}
	if pb.Orders() != 1 || m2.Stats().Obtaining != 0 {
		t.Fatalf("restart made an order: pebble %d orders, stats %+v", pb.Orders(), m2.Stats())
	}
}

// TestACMEEachChallengeAloneGetsACertificateFromPebble proves HTTP-01 and
// TLS-ALPN-01 each on their own: with no port-80 listener only TLS-ALPN-01
// can pass, and with TLS-ALPN-01 off only HTTP-01.
func TestACMEEachChallengeAloneGetsACertificateFromPebble(t *testing.T) {
	for _, tc := range []struct {
		name      string
		withHTTP  bool
		noTLSALPN bool
	}{{"tls-alpn-01", false, false}, {"http-01", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			httpPort, httpsPort := testutil.FreePort(t), testutil.FreePort(t)
			httpAddr, httpsAddr := fmt.Sprintf("127.0.0.1:%d", httpPort), fmt.Sprintf("127.0.0.1:%d", httpsPort)
			pb := testutil.StartPebble(t, httpPort, httpsPort)
			if !tc.withHTTP {
				httpAddr = ""
			}
			host := tc.name + ".gpud.test"
			_, _ = pebbleTLS(t, pb, &certmagic.FileStorage{Path: t.TempDir()}, httpAddr, httpsAddr, tlsTestHosts{host: true}, tc.noTLSALPN)
			body, _ := getTLS(t, tlsTestClient(t, pb.Root(t), httpsAddr), "https://"+host+"/")
			if body != "hello from "+host {
				t.Fatalf("body %q", body)
			}
			if pb.Issued() != 1 {
				t.Fatalf("pebble issued %d", pb.Issued())
			}
		})
	}
}
