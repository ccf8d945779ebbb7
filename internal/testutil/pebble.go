package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Pebble is Debian's pebble ACME test server, started for one test on
// loopback: it validates challenges for real (PEBBLE_VA_NOSLEEP only skips
// its random delays), resolving every name through a DNS server of the
// test's own that answers 127.0.0.1, and reaching the HTTP-01 and
// TLS-ALPN-01 responders on the ports the test gave it.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// ListenerCAPEM is the CA of pebble's own HTTPS listener (ACME and
	// management): the ACME client trusts it to reach Directory.
	ListenerCAPEM []byte
	// ListenerCAFile holds ListenerCAPEM.
	ListenerCAFile string
	mgmt           string
	out            *SyncBuffer
}

// StartPebble starts pebble with HTTP-01 validation on 127.0.0.1:httpPort
// and TLS-ALPN-01 on 127.0.0.1:tlsPort, or skips the test when pebble is
// not installed (.ci/services.sh installs it). It stops when the test ends.
func StartPebble(t testing.TB, httpPort, tlsPort int) *Pebble {
	t.Helper()
	bin, err := exec.LookPath("pebble")
	if err != nil {
		t.Skip("pebble is not installed (apt-get install pebble; .ci/services.sh does)")
	}
	dir := t.TempDir()
	caPEM, certPEM, keyPEM := listenerCert(t)
	p := &Pebble{ListenerCAPEM: caPEM, ListenerCAFile: filepath.Join(dir, "listener-ca.pem"), out: &SyncBuffer{}}
	WriteFiles(t, dir, map[string]string{"listener-ca.pem": string(caPEM), "cert.pem": string(certPEM), "key.pem": string(keyPEM)})
	dnsAddr := startLoopbackDNS(t)
	acmePort, mgmtPort := FreePort(t), FreePort(t)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":                  fmt.Sprintf("127.0.0.1:%d", acmePort),
		"managementListenAddress":        fmt.Sprintf("127.0.0.1:%d", mgmtPort),
		"certificate":                    filepath.Join(dir, "cert.pem"),
		"privateKey":                     filepath.Join(dir, "key.pem"),
		"httpPort":                       httpPort,
		"tlsPort":                        tlsPort,
		"ocspResponderURL":               "",
		"externalAccountBindingRequired": false,
	}}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	WriteFiles(t, dir, map[string]string{"pebble.json": string(b)})
	cmd := exec.Command(bin, "-config", filepath.Join(dir, "pebble.json"), "-dnsserver", dnsAddr)
	// Real validation: no PEBBLE_VA_ALWAYS_VALID. No random nonce
	// rejections or validation sleeps, which only slow a test down.
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0")
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pebble: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("pebble's output:\n%s", p.out.String())
		}
	})
	p.Directory = fmt.Sprintf("https://127.0.0.1:%d/dir", acmePort)
	p.mgmt = fmt.Sprintf("https://127.0.0.1:%d", mgmtPort)
	Eventually(t, 30*time.Second, func() error {
		_, err := p.get(p.Directory)
		return err
	})
	return p
}

// Root is the PEM of the root that pebble's issued certificates chain to
// (from its management endpoint /roots/0).
func (p *Pebble) Root(t testing.TB) []byte {
	t.Helper()
	b, err := p.get(p.mgmt + "/roots/0")
	if err != nil {
		t.Fatalf("pebble root: %v", err)
	}
	return b
}

var pebbleOrders = regexp.MustCompile(`There are now (\d+) orders in the db`)

// Orders is how many orders pebble has taken so far (from its log).
func (p *Pebble) Orders() int {
	n := 0
	for _, m := range pebbleOrders.FindAllStringSubmatch(p.out.String(), -1) {
		if v, err := strconv.Atoi(m[1]); err == nil && v > n {
			n = v
		}
	}
	return n
}

// Issued is how many certificates pebble has issued so far (from its log).
func (p *Pebble) Issued() int { return strings.Count(p.out.String(), "Issued certificate serial") }

// Output is pebble's log so far.
func (p *Pebble) Output() string { return p.out.String() }

func (p *Pebble) get(url string) ([]byte, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.ListenerCAPEM)
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return b, nil
}

// listenerCert makes a CA and a certificate for 127.0.0.1 and localhost
// that it signs: Debian's pebble ships no test certificates.
func listenerCert(t testing.TB) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pebble listener test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// startLoopbackDNS serves DNS on 127.0.0.1 (UDP) for the test: every A
// question is answered 127.0.0.1, every other question with no records.
func startLoopbackDNS(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("dns: %v", err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		for _, question := range q.Question {
			if question.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: question.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1},
					A:   net.IPv4(127, 0, 0, 1),
				})
			}
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}
