package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// tlsTestHosts is a Resolver that knows services only by host name.
type tlsTestHosts map[string]bool

func (h tlsTestHosts) ServiceByHost(host string) (*Service, bool) {
	if !h[host] {
		return nil, false
	}
	return &Service{Project: "main", Run: host, Hosts: []string{host}}, true
}
func (tlsTestHosts) Service(string, string) (*Service, bool) { return nil, false }
func (tlsTestHosts) Models(string) []*Service                { return nil }
func (tlsTestHosts) Authorize(*http.Request, *Service) error { return nil }
func (tlsTestHosts) WaitReplica(context.Context, *Service) (*Service, error) {
	return nil, errors.New("no replicas in TLS tests")
}

// tlsTestServer serves m's HTTPS on httpsAddr and its port-80 handler on
// httpAddr (when set), answering every request with "hello from " and the
// host; it stops when the test ends or stop is called.
type tlsTestServer struct {
	https, http *Front // as the gateway's listeners serve
}

func startTLSTestServer(t *testing.T, m *TLS, httpsAddr, httpAddr string) *tlsTestServer {
	t.Helper()
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello from "+hostOnly(r.Host))
	})
	s := &tlsTestServer{https: NewFront(&http.Server{Handler: app, ReadHeaderTimeout: 10 * time.Second})}
	ln, err := net.Listen("tcp", httpsAddr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.https.Serve(tls.NewListener(ln, m.TLSConfig())) }()
	if httpAddr != "" {
		hl, err := net.Listen("tcp", httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		s.http = NewFront(&http.Server{Handler: m.HTTPHandler(nil, nil), ReadHeaderTimeout: 10 * time.Second})
		go func() { _ = s.http.Serve(hl) }()
	}
	t.Cleanup(s.stop)
	return s
}

func (s *tlsTestServer) stop() {
	_ = s.https.Close()
	if s.http != nil {
		_ = s.http.Close()
	}
}

// tlsTestClient reaches every host at addr, trusting only rootPEM.
func tlsTestClient(t *testing.T, rootPEM []byte, addr string) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(rootPEM) {
		t.Fatalf("no certificate in the root PEM:\n%s", rootPEM)
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, network, addr)
			},
			ForceAttemptHTTP2: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// getTLS GETs url and returns the body and the leaf certificate served.
func getTLS(t *testing.T, cl *http.Client, url string) (string, *x509.Certificate) {
	t.Helper()
	resp, err := cl.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		t.Fatalf("GET %s: no TLS", url)
	}
	return string(b), resp.TLS.PeerCertificates[0]
}

// handshakeFails dials addr with SNI name, trusting nothing (any
// certificate would do), and fails the test if the server presents one.
func handshakeFails(t *testing.T, addr, name string) {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", addr,
		&tls.Config{ServerName: name, InsecureSkipVerify: true}) //nolint:gosec // any certificate at all is the failure
	if err == nil {
		certs := conn.ConnectionState().PeerCertificates
		_ = conn.Close()
		t.Fatalf("handshake for unknown SNI %s got a certificate for %v", name, certs[0].DNSNames)
	}
}
