package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gpud.dev/gpud/proxy"
)

// The gateway's certificate modes (Options.GatewayTLS).
const (
	// GatewayTLSACME obtains certificates from an ACME CA (Options.ACMECA,
	// default Let's Encrypt) over HTTP-01 and TLS-ALPN-01.
	GatewayTLSACME = "acme"
	// GatewayTLSInternal issues them from a CA of the server's own, kept
	// in the state file; clients trust DATA_DIR/gateway-ca.pem.
	GatewayTLSInternal = "internal"
	// GatewayTLSNone serves the gateway over plain HTTP only.
	GatewayTLSNone = "none"
)

// GatewayCAFile is the file in DataDir where a server with the internal CA
// writes the CA's certificate, for clients to trust.
const GatewayCAFile = "gateway-ca.pem"

// gatewayServer is the server's HTTPS gateway: the listeners on port 443
// and 80, the certificate manager, and the handler that serves services
// at their hosts. Its zero value serves nothing (no --domain).
type gatewayServer struct {
	// applyMu serializes gateway applies (one domain, one project).
	applyMu sync.Mutex
	// external: standalone gateways serve the gateway domains
	// (Options.ExternalGateway).
	external bool
	// hosts caches which service a hostname reaches (gateway_hosts.go).
	hosts hostCache

	tls         *proxy.TLS   // nil in GatewayTLSNone mode or when off
	https, http *proxy.Front // the gateway's own HTTP/1.1 front, net/http behind it
	httpsAddr   string
	httpAddr    string
	// services serves a request whose host is a service's; nil until the
	// gateway's request path (proxy.Gateway) is wired: path routing
	// through the API's service proxy serves them meanwhile.
	services atomic.Pointer[http.Handler]
}

// listening reports whether gateways of that kind (plain HTTP, or HTTPS)
// are served: by the server's listeners, or by standalone gateways.
func (g *gatewayServer) listening(plain bool) bool {
	if g.external {
		return true
	}
	if plain {
		return g.http != nil
	}
	return g.https != nil
}

// serveServices makes h serve the requests for services' hosts on the
// gateway listeners (h routes them by host itself).
func (g *gatewayServer) serveServices(h http.Handler) { g.services.Store(&h) }

// GatewayHTTPSAddr and GatewayHTTPAddr are the addresses the gateway's
// listeners took ("" when off).
func (s *Server) GatewayHTTPSAddr() string { return s.gateway.httpsAddr }

// GatewayHTTPAddr is the gateway's plain-HTTP listener's address.
func (s *Server) GatewayHTTPAddr() string { return s.gateway.httpAddr }

// GatewayCACertPEM is the internal CA's certificate (nil unless the
// gateway runs with GatewayTLSInternal).
func (s *Server) GatewayCACertPEM() []byte {
	if s.gateway.tls == nil {
		return nil
	}
	return s.gateway.tls.CACertPEM()
}

// GatewayTLSStats counts the gateway's certificate work since start.
func (s *Server) GatewayTLSStats() proxy.TLSStats {
	if s.gateway.tls == nil {
		return proxy.TLSStats{}
	}
	return s.gateway.tls.Stats()
}

// gatewayEnabled reports whether the options ask for gateway listeners.
func gatewayEnabled(o Options) bool {
	return o.Domain != "" || o.HTTPSListen != "" || o.HTTPListen != ""
}

// startGateway opens the gateway's listeners and starts serving them:
// HTTPS (certificates on demand for known hosts) with api behind hosts
// that are no service's, and plain HTTP for ACME HTTP-01, redirects to
// HTTPS, and gateways with certificate: none.
func (s *Server) startGateway(ctx context.Context, api http.Handler) error {
	if d := strings.ToLower(strings.TrimSuffix(s.opts.Domain, ".")); d != "" {
		if !validHostname(d) {
			return fmt.Errorf("gateway: --domain %q is not a hostname: write a DNS name like gpud.example.com", s.opts.Domain)
		}
		s.opts.Domain = d // hosts are compared lower case, without the root's dot
	}
	o := s.opts
	s.gateway.external = o.ExternalGateway
	s.startHostFeed()
	if !gatewayEnabled(o) {
		return nil
	}
	mode := o.GatewayTLS
	if mode == "" {
		mode = GatewayTLSACME
	}
	httpAddr, httpsAddr := o.HTTPListen, o.HTTPSListen
	if httpAddr == "" {
		httpAddr = ":80"
	}
	if httpsAddr == "" && mode != GatewayTLSNone {
		httpsAddr = ":443"
	}
	if mode == GatewayTLSNone {
		httpsAddr = ""
	}
	g := &s.gateway
	errLog := log.New(zerologDebug{s}, "", 0)
	var httpsLn net.Listener
	if httpsAddr != "" {
		ln, err := net.Listen("tcp", httpsAddr)
		if err != nil {
			return fmt.Errorf("gateway: listen %s (--https-listen): %w", httpsAddr, err)
		}
		httpsLn = ln
		g.httpsAddr = ln.Addr().String()
	}
	httpLn, err := net.Listen("tcp", httpAddr)
	if err != nil {
		if httpsLn != nil {
			_ = httpsLn.Close()
		}
		return fmt.Errorf("gateway: listen %s (--http-listen): %w", httpAddr, err)
	}
	g.httpAddr = httpLn.Addr().String()
	closeAll := func() {
		_ = httpLn.Close()
		if httpsLn != nil {
			_ = httpsLn.Close()
		}
	}
	front := s.gatewayFront(api)
	if mode != GatewayTLSNone {
		topts := proxy.TLSOptions{Storage: s.store.KV(), Email: o.ACMEEmail, CA: o.ACMECA,
			HTTPAddr: g.httpAddr, HTTPSAddr: g.httpsAddr, Allow: s.allowCertificate,
			Log: s.log.With().Str("part", "gateway-tls").Logger()}
		switch mode {
		case GatewayTLSACME:
			topts.Source = proxy.CertACME
			if o.ACMECARoot != "" {
				pem, err := os.ReadFile(o.ACMECARoot)
				if err != nil {
					closeAll()
					return fmt.Errorf("gateway: --acme-ca-root: %w", err)
				}
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					closeAll()
					return fmt.Errorf("gateway: --acme-ca-root %s holds no PEM certificate", o.ACMECARoot)
				}
				topts.CARoots = pool
			}
		case GatewayTLSInternal:
			topts.Source = proxy.CertInternal
		default:
			closeAll()
			return fmt.Errorf("gateway: unknown --tls %q: use acme, internal or none", mode)
		}
		m, err := proxy.NewTLS(ctx, topts)
		if err != nil {
			closeAll()
			return fmt.Errorf("gateway: %w", err)
		}
		g.tls = m
		if ca := m.CACertPEM(); ca != nil {
			if err := os.WriteFile(filepath.Join(o.DataDir, GatewayCAFile), ca, 0o644); err != nil {
				closeAll()
				m.Stop()
				return fmt.Errorf("gateway: write the internal CA: %w", err)
			}
		}
		g.https = proxy.NewFront(&http.Server{Handler: front, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: gatewayIdleTimeout, ErrorLog: errLog})
		g.http = proxy.NewFront(&http.Server{Handler: m.HTTPHandler(s.plainHost, front), ReadHeaderTimeout: 30 * time.Second, IdleTimeout: gatewayIdleTimeout, ErrorLog: errLog})
		tlsLn := tls.NewListener(httpsLn, m.TLSConfig())
		s.serveGateway(g.https, tlsLn)
	} else {
		g.http = proxy.NewFront(&http.Server{Handler: front, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: gatewayIdleTimeout, ErrorLog: errLog})
	}
	s.serveGateway(g.http, httpLn)
	s.log.Info().Str("https", g.httpsAddr).Str("http", g.httpAddr).Str("domain", o.Domain).Str("tls", mode).Msg("gateway listening")
	return nil
}

// gatewayIdleTimeout closes a client's keep-alive connection idle that
// long.
const gatewayIdleTimeout = 2 * time.Minute

func (s *Server) serveGateway(srv *proxy.Front, ln net.Listener) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Str("addr", ln.Addr().String()).Msg("gateway listener stopped")
		}
	}()
}

// closeGateway stops the gateway's listeners (in-flight requests get until
// ctx ends) and its certificate maintenance.
func (s *Server) closeGateway(ctx context.Context) error {
	g := &s.gateway
	var err error
	for _, srv := range []*proxy.Front{g.https, g.http} {
		if srv != nil {
			if e := srv.Shutdown(ctx); e != nil {
				err = errors.Join(err, srv.Close())
			}
		}
	}
	if g.tls != nil {
		g.tls.Stop()
	}
	return err
}

// gatewayFront routes a gateway request: a service's host to the
// service, anything else to the API (so the API is served over HTTPS at
// the server's domain too).
func (s *Server) gatewayFront(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.serveModelsHost(w, r, api) { // gateway.<domain>: gateway_models.go
			return
		}
		run, _, ok := s.hostAt(requestHost(r))
		if !ok {
			api.ServeHTTP(w, r)
			return
		}
		if h := s.gateway.services.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		// Until the gateway's own request path is wired: the API's
		// service proxy, with the service's path prefix added.
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/proxy/services/" + run.Project + "/" + run.Name + r.URL.Path
		r2.URL.RawPath = ""
		api.ServeHTTP(w, r2)
	})
}

// requestHost is a request's host, lower case, without port or final dot.
func requestHost(r *http.Request) string {
	h := r.Host
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// plainHost reports whether host is a service's served over plain HTTP
// (its gateway says certificate: none).
func (s *Server) plainHost(host string) bool {
	if _, plain, ok := s.modelsAtHost(host); ok {
		return plain
	}
	_, plain, ok := s.hostAt(host)
	return ok && plain
}

// allowCertificate is the certificate manager's on-demand decision: the
// server's own domain (the API over HTTPS), the hosts of active services
// with a certificate, and the projects' model endpoint hosts
// (gateway.<domain>); nothing else, so an arbitrary SNI never makes an
// order.
func (s *Server) allowCertificate(_ context.Context, name string) error {
	if name != "" && name == s.opts.Domain {
		return nil
	}
	if _, plain, ok := s.hostAt(name); ok && !plain {
		return nil
	}
	if _, plain, ok := s.modelsAtHost(name); ok && !plain {
		return nil // a project's model endpoint (gateway_models.go)
	}
	return fmt.Errorf("%w: %s", proxy.ErrUnknownHost, name)
}

// zerologDebug writes the gateway listeners' own log lines (TLS handshake
// errors from scanners and unknown names) at debug level.
type zerologDebug struct{ s *Server }

func (z zerologDebug) Write(p []byte) (int, error) {
	z.s.log.Debug().Str("part", "gateway").Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

// handleGatewayCA serves the internal CA's certificate: public, as a CA
// certificate is; clients need it before they have any token.
func (s *Server) handleGatewayCA(w http.ResponseWriter, _ *http.Request) error {
	ca := s.GatewayCACertPEM()
	if ca == nil {
		return notFound("gateway CA", "internal")
	}
	w.Header().Set("Content-Type", "application/x-pem-file")
	_, err := w.Write(ca)
	return err
}
