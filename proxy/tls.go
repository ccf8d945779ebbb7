package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"github.com/rs/zerolog"
	"go.uber.org/zap"
)

// CertSource says where the gateway's certificates come from.
type CertSource string

const (
	// CertACME obtains certificates from an ACME CA (Let's Encrypt by
	// default) over HTTP-01 or TLS-ALPN-01.
	CertACME CertSource = "acme"
	// CertInternal issues certificates from a CA that gpud generates once
	// and keeps in the storage, for sites without a public CA (air-gapped):
	// clients trust that CA's certificate (TLS.CACertPEM).
	CertInternal CertSource = "internal"
)

// LetsEncryptCA is the default ACME directory: Let's Encrypt production.
const LetsEncryptCA = certmagic.LetsEncryptProductionCA

// TLSOptions configure the gateway's certificates.
type TLSOptions struct {
	Source CertSource
	// Storage keeps certificates, their keys, the ACME account and the
	// internal CA; certificates survive restarts because they live here.
	// The server passes its store's key-value namespace (encrypted at rest).
	Storage certmagic.Storage
	// CA is the ACME directory URL (default LetsEncryptCA); Email the
	// account's contact (may be empty); CARoots, when set, are the roots
	// trusted for the CA's own HTTPS endpoint (a private ACME CA such as
	// pebble), else the system's.
	CA      string
	Email   string
	CARoots *x509.CertPool
	// HTTPAddr and HTTPSAddr are the addresses (host:port) of the server's
	// port-80 and port-443 listeners, where the ACME CA validates HTTP-01
	// and TLS-ALPN-01 challenges: the challenge solvers answer there
	// (through HTTPHandler and TLSConfig) instead of opening listeners of
	// their own.
	HTTPAddr, HTTPSAddr string
	// Allow says whether a hostname (lower case, punycode) may have a
	// certificate. It is asked before a certificate is loaded or obtained
	// for an SNI, so a handshake for a name the server does not know
	// neither gets a certificate nor makes an order. Nil allows none.
	Allow func(ctx context.Context, name string) error
	// Log receives certificate events (obtaining, obtained, failed, refused).
	Log zerolog.Logger

	// noTLSALPN keeps to HTTP-01 (tests prove each challenge alone).
	noTLSALPN bool
}

// TLS terminates the gateway's TLS: it serves certificates for allowed
// hostnames from Storage, obtaining them on demand at the first handshake
// (ACME or the internal CA), renews them in the background, and answers
// ACME challenges. Its methods are safe for concurrent use.
type TLS struct {
	opts      TLSOptions
	cache     *certmagic.Cache
	cfg       *certmagic.Config
	acme      *certmagic.ACMEIssuer // nil unless Source is CertACME
	ca        *internalCA           // nil unless Source is CertInternal
	httpsPort string
	stopOnce  sync.Once

	obtaining atomic.Int64
	obtained  atomic.Int64
	refused   atomic.Int64
}

// NewTLS prepares the certificate manager; with CertInternal it loads the
// internal CA from Storage, creating it on first use. Call Stop to end its
// background maintenance.
func NewTLS(ctx context.Context, opts TLSOptions) (*TLS, error) {
	if opts.Storage == nil {
		return nil, errors.New("tls: no certificate storage")
	}
	t := &TLS{opts: opts}
	if _, port, err := net.SplitHostPort(opts.HTTPSAddr); err == nil {
		t.httpsPort = port
	}
	var issuer certmagic.Issuer
	t.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return t.cfg, nil },
		Logger:           zap.NewNop(),
	})
	t.cfg = certmagic.New(t.cache, certmagic.Config{
		Storage:  opts.Storage,
		Logger:   zap.NewNop(),
		OnEvent:  t.onEvent,
		OnDemand: &certmagic.OnDemandConfig{DecisionFunc: t.decide},
	})
	switch opts.Source {
	case CertACME:
		ca := opts.CA
		if ca == "" {
			ca = LetsEncryptCA
		}
		// Agreed: running the gateway with ACME is accepting the CA's
		// terms (docs/gateway.md says so).
		tmpl := certmagic.ACMEIssuer{
			CA: ca, Email: opts.Email, Agreed: true,
			TrustedRoots: opts.CARoots, Logger: zap.NewNop(),
		}
		if ca != LetsEncryptCA {
			// certmagic retries a failing order against Let's Encrypt's
			// staging directory; another CA has none of its own.
			tmpl.TestCA = ca
		}
		// The solvers try to listen on these addresses, find them taken
		// by the server's own listeners and leave the answering to them.
		if host, port, err := splitPort(opts.HTTPAddr); err == nil {
			tmpl.ListenHost, tmpl.AltHTTPPort = host, port
		} else {
			tmpl.DisableHTTPChallenge = true
		}
		if host, port, err := splitPort(opts.HTTPSAddr); err == nil && !opts.noTLSALPN {
			if tmpl.ListenHost == "" || host == tmpl.ListenHost {
				tmpl.ListenHost, tmpl.AltTLSALPNPort = host, port
			} else {
				// One ListenHost serves both solvers: keep HTTP-01.
				tmpl.DisableTLSALPNChallenge = true
			}
		} else {
			tmpl.DisableTLSALPNChallenge = true
		}
		if tmpl.DisableHTTPChallenge && tmpl.DisableTLSALPNChallenge {
			t.cache.Stop()
			return nil, errors.New("tls: ACME needs the HTTP (port 80) or HTTPS (port 443) listener's address to answer challenges")
		}
		t.acme = certmagic.NewACMEIssuer(t.cfg, tmpl)
		issuer = t.acme
	case CertInternal:
		ca, err := loadOrCreateCA(ctx, opts.Storage)
		if err != nil {
			t.cache.Stop()
			return nil, err
		}
		t.ca = ca
		issuer = ca
		t.cfg.OCSP.DisableStapling = true // gpud's CA runs no OCSP responder
	default:
		t.cache.Stop()
		return nil, fmt.Errorf("tls: unknown certificate source %q (use acme or internal)", opts.Source)
	}
	t.cfg.Issuers = []certmagic.Issuer{issuer}
	return t, nil
}

func splitPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := net.LookupPort("tcp", p)
	if err != nil || port == 0 {
		return "", 0, fmt.Errorf("address %q has no port", addr)
	}
	return host, port, nil
}

// decide is certmagic's on-demand decision: only names Allow accepts.
func (t *TLS) decide(ctx context.Context, name string) error {
	err := errors.New("no hostname is allowed")
	if t.opts.Allow != nil {
		err = t.opts.Allow(ctx, strings.ToLower(name))
	}
	if err != nil {
		t.refused.Add(1)
		t.opts.Log.Debug().Str("host", name).Err(err).Msg("tls: no certificate for this name")
	}
	return err
}

func (t *TLS) onEvent(_ context.Context, event string, data map[string]any) error {
	switch event {
	case "cert_obtaining":
		t.obtaining.Add(1)
		t.opts.Log.Info().Any("host", data["identifier"]).Msg("tls: obtaining a certificate")
	case "cert_obtained":
		t.obtained.Add(1)
		t.opts.Log.Info().Any("host", data["identifier"]).Any("issuer", data["issuer"]).Msg("tls: certificate obtained")
	case "cert_failed":
		t.opts.Log.Warn().Any("host", data["identifier"]).Any("error", data["error"]).Msg("tls: obtaining a certificate failed")
	}
	return nil
}

// TLSConfig is the configuration of the HTTPS listener: certificates by
// SNI (obtained on demand for allowed names), HTTP/2 and HTTP/1.1, and
// the TLS-ALPN-01 challenge answered on the same port.
func (t *TLS) TLSConfig() *tls.Config {
	c := t.cfg.TLSConfig()
	c.MinVersion = tls.VersionTLS12
	c.NextProtos = []string{"h2", "http/1.1", acmez.ACMETLS1Protocol}
	return c
}

// HTTPHandler serves the plain-HTTP listener (port 80): it answers ACME
// HTTP-01 challenges and redirects every other request to https, but for
// hosts plain says are served over plain HTTP (a gateway with
// certificate: none), which go to next. plain may be nil.
func (t *TLS) HTTPHandler(plain func(host string) bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t.acme != nil && t.acme.HandleHTTPChallenge(w, r) {
			return
		}
		host := hostOnly(r.Host)
		if plain != nil && next != nil && plain(host) {
			next.ServeHTTP(w, r)
			return
		}
		if host == "" {
			http.Error(w, "this server serves HTTPS: name a host", http.StatusBadRequest)
			return
		}
		target := "https://" + host
		if t.httpsPort != "" && t.httpsPort != "443" {
			target += ":" + t.httpsPort
		}
		http.Redirect(w, r, target+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
}

// hostOnly is a request's host, lower case, without its port.
func hostOnly(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// Manage obtains (or loads from Storage) certificates for names now
// rather than at their first handshake, and keeps them renewed.
func (t *TLS) Manage(ctx context.Context, names []string) error {
	return t.cfg.ManageSync(ctx, names)
}

// CACertPEM is the internal CA's certificate, which clients trust to reach
// the gateway (CertInternal only; nil otherwise).
func (t *TLS) CACertPEM() []byte {
	if t.ca == nil {
		return nil
	}
	return append([]byte(nil), t.ca.certPEM...)
}

// TLSStats count certificate work since the manager started.
type TLSStats struct {
	// Obtaining counts certificate orders started (ACME orders, or
	// internal issuances); Obtained those that succeeded; Refused the
	// handshakes or requests for names Allow refused.
	Obtaining, Obtained, Refused int64
}

// Stats returns the counters.
func (t *TLS) Stats() TLSStats {
	return TLSStats{Obtaining: t.obtaining.Load(), Obtained: t.obtained.Load(), Refused: t.refused.Load()}
}

// Stop ends background certificate maintenance.
// It is safe to call more than once.
func (t *TLS) Stop() { t.stopOnce.Do(t.cache.Stop) }

// ErrUnknownHost is Allow's answer for a hostname the server does not know.
var ErrUnknownHost = errors.New("unknown host: no service, gateway or API is served at this name")

// KnownHosts is the Allow of a gateway: a name gets a certificate only if
// it is one of fixed (the gateway's and the API's own hostnames) or a
// service the resolver serves at that host, so an arbitrary SNI never
// makes an ACME order.
func KnownHosts(r Resolver, fixed ...string) func(ctx context.Context, name string) error {
	set := make(map[string]bool, len(fixed))
	for _, h := range fixed {
		if h = hostOnly(h); h != "" {
			set[h] = true
		}
	}
	return func(_ context.Context, name string) error {
		name = hostOnly(name)
		if set[name] {
			return nil
		}
		if r != nil {
			if _, ok := r.ServiceByHost(name); ok {
				return nil
			}
		}
		return fmt.Errorf("%w: %s", ErrUnknownHost, name)
	}
}
