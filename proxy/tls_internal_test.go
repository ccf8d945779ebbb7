package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/certmagic"
	"github.com/rs/zerolog"

	"gpud.dev/gpud/internal/testutil"
)

// TestInternalCAServesKnownHostsAndSurvivesRestart is the air-gapped mode:
// no ACME CA, gpud's own CA (kept in the storage) issues the certificate of
// a known service at its first handshake; an unknown SNI gets none; after a
// restart on the same storage the CA and the certificate are the same ones
// and nothing new is issued.
func TestInternalCAServesKnownHostsAndSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	storage := &certmagic.FileStorage{Path: t.TempDir()}
	hosts := tlsTestHosts{"svc.gpud.test": true}
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	start := func() (*TLS, *tlsTestServer) {
		m, err := NewTLS(ctx, TLSOptions{Source: CertInternal, Storage: storage, HTTPSAddr: addr,
			Allow: KnownHosts(hosts, "gateway.gpud.test"), Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Stop)
		return m, startTLSTestServer(t, m, addr, "")
	}
	m, srv := start()
	caPEM := m.CACertPEM()
	cl := tlsTestClient(t, caPEM, addr)
	body, leaf := getTLS(t, cl, "https://svc.gpud.test/")
	if body != "hello from svc.gpud.test" {
		t.Fatalf("body %q", body)
	}
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "svc.gpud.test" {
		t.Fatalf("leaf names %v", leaf.DNSNames)
	}
	if st := m.Stats(); st.Obtained != 1 {
		t.Fatalf("stats after the first handshake: %+v, want 1 obtained", st)
	}
	// The gateway's own hostname is allowed too.
	if _, gw := getTLS(t, cl, "https://gateway.gpud.test/"); gw.DNSNames[0] != "gateway.gpud.test" {
		t.Fatalf("gateway leaf names %v", gw.DNSNames)
	}

	handshakeFails(t, addr, "nobody.gpud.test")
	if st := m.Stats(); st.Obtaining != 2 || st.Refused == 0 {
		t.Fatalf("stats after an unknown SNI: %+v, want 2 issuances (svc, gateway) and a refusal", st)
	}

	srv.stop()
	m.Stop()
	m2, _ := start()
	if string(m2.CACertPEM()) != string(caPEM) {
		t.Fatal("the internal CA changed across a restart: clients would stop trusting the gateway")
	}
	_, again := getTLS(t, tlsTestClient(t, caPEM, addr), "https://svc.gpud.test/")
	if again.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
		t.Fatalf("serial %s after restart, %s before: the certificate was not kept", again.SerialNumber, leaf.SerialNumber)
	}
	if st := m2.Stats(); st.Obtaining != 0 {
		t.Fatalf("a restart issued again: %+v", st)
	}
}

// TestInternalCALeafIsForServerAuthOnly checks what the internal CA signs:
// a CA that can sign only one level down, leaves for server auth with the
// CSR's names.
func TestInternalCALeafIsForServerAuthOnly(t *testing.T) {
	ctx := context.Background()
	ca, err := loadOrCreateCA(ctx, &certmagic.FileStorage{Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !ca.cert.IsCA || !ca.cert.MaxPathLenZero {
		t.Fatalf("CA constraints: IsCA %v MaxPathLenZero %v", ca.cert.IsCA, ca.cert.MaxPathLenZero)
	}
	csr := testCSR(t, "a.gpud.test")
	issued, err := ca.Issue(ctx, csr)
	if err != nil {
		t.Fatal(err)
	}
	leaf := firstCert(t, issued.Certificate)
	if len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || leaf.IsCA {
		t.Fatalf("leaf usage %v IsCA %v", leaf.ExtKeyUsage, leaf.IsCA)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "a.gpud.test", Roots: pool}); err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "b.gpud.test", Roots: pool}); err == nil || !strings.Contains(err.Error(), "b.gpud.test") {
		t.Fatalf("leaf verified for another name: %v", err)
	}
}

func testCSR(t *testing.T, name string) *x509.CertificateRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{name}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

func firstCert(t *testing.T, chainPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(chainPEM)
	if b == nil {
		t.Fatalf("no PEM in %q", chainPEM)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
