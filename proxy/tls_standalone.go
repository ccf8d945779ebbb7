package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
)

// StandaloneOptions configure a standalone gateway (`gpud gateway --server
// URL`): a public host that terminates TLS for a gpud server's services
// and forwards each request to the server's service path.
type StandaloneOptions struct {
	// Server is the gpud server's API; its token names whose services the
	// gateway serves (those of the token's projects). Transport reaches
	// the server (nil: http.DefaultTransport).
	Server    *api.Client
	Transport http.RoundTripper
	// HTTPSListen and HTTPListen are the gateway's addresses (default :443
	// and :80); with Source "" only HTTPListen is opened.
	HTTPSListen, HTTPListen string
	// Source, CA, Email, CARoots are TLSOptions' ("" Source: plain HTTP).
	Source  CertSource
	CA      string
	Email   string
	CARoots *x509.CertPool
	// Storage keeps the gateway's certificates (a directory of its own).
	Storage certmagic.Storage
	// HostTTL is how long an answer of the server about a host is reused
	// (default 5s).
	HostTTL time.Duration
	Log     zerolog.Logger
}

// Standalone is a running standalone gateway.
type Standalone struct {
	opts        StandaloneOptions
	tls         *TLS
	https, http *Front // the gateway's own HTTP/1.1 front, net/http behind it
	httpsLn     net.Listener
	httpLn      net.Listener
	base        *url.URL
	forward     *httputil.ReverseProxy

	mu    sync.Mutex
	hosts map[string]hostAnswer
}

type hostAnswer struct {
	h       api.GatewayHost
	ok      bool
	expires time.Time
}

// maxCachedHosts bounds the host cache; past it, it starts anew.
const maxCachedHosts = 10_000

// NewStandalone opens the gateway's listeners and prepares its
// certificates; Serve serves them.
func NewStandalone(ctx context.Context, opts StandaloneOptions) (*Standalone, error) {
	if opts.Server == nil {
		return nil, errors.New("standalone gateway: no server")
	}
	base, err := url.Parse(opts.Server.BaseURL())
	if err != nil {
		return nil, fmt.Errorf("standalone gateway: server URL: %w", err)
	}
	if opts.HostTTL <= 0 {
		opts.HostTTL = 5 * time.Second
	}
	if opts.HTTPListen == "" {
		opts.HTTPListen = ":80"
	}
	if opts.HTTPSListen == "" {
		opts.HTTPSListen = ":443"
	}
	g := &Standalone{opts: opts, base: base, hosts: map[string]hostAnswer{}}
	g.forward = &httputil.ReverseProxy{
		Rewrite:       g.rewrite,
		Transport:     opts.Transport,
		FlushInterval: -1, // SSE and streamed answers go out as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			opts.Log.Warn().Err(err).Str("host", r.Host).Msg("standalone gateway: the server did not answer")
			http.Error(w, "the gpud server did not answer", http.StatusBadGateway)
		},
	}
	if g.httpLn, err = net.Listen("tcp", opts.HTTPListen); err != nil {
		return nil, fmt.Errorf("standalone gateway: listen %s: %w", opts.HTTPListen, err)
	}
	front := http.HandlerFunc(g.serve)
	if opts.Source == "" {
		g.http = NewFront(&http.Server{Handler: front, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: debugLog(opts.Log)})
		return g, nil
	}
	if g.httpsLn, err = net.Listen("tcp", opts.HTTPSListen); err != nil {
		_ = g.httpLn.Close()
		return nil, fmt.Errorf("standalone gateway: listen %s: %w", opts.HTTPSListen, err)
	}
	g.tls, err = NewTLS(ctx, TLSOptions{Source: opts.Source, Storage: opts.Storage, CA: opts.CA, Email: opts.Email, CARoots: opts.CARoots,
		HTTPAddr: g.httpLn.Addr().String(), HTTPSAddr: g.httpsLn.Addr().String(), Allow: g.allow, Log: opts.Log})
	if err != nil {
		_ = g.httpLn.Close()
		_ = g.httpsLn.Close()
		return nil, err
	}
	g.https = NewFront(&http.Server{Handler: front, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: debugLog(opts.Log)})
	g.http = NewFront(&http.Server{Handler: g.tls.HTTPHandler(g.plainHost, front), ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: debugLog(opts.Log)})
	return g, nil
}

// HTTPSAddr and HTTPAddr are the addresses the listeners took.
func (g *Standalone) HTTPSAddr() string {
	if g.httpsLn == nil {
		return ""
	}
	return g.httpsLn.Addr().String()
}

// HTTPAddr is the plain-HTTP listener's address.
func (g *Standalone) HTTPAddr() string { return g.httpLn.Addr().String() }

// CACertPEM is the internal CA's certificate (CertInternal only).
func (g *Standalone) CACertPEM() []byte {
	if g.tls == nil {
		return nil
	}
	return g.tls.CACertPEM()
}

// Serve serves until ctx ends, then shuts down (in-flight requests get
// 10s).
func (g *Standalone) Serve(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() { errc <- g.http.Serve(g.httpLn) }()
	if g.https != nil {
		go func() { errc <- g.https.Serve(tls.NewListener(g.httpsLn, g.tls.TLSConfig())) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = errors.Join(err, g.http.Shutdown(sctx))
	if g.https != nil {
		err = errors.Join(err, g.https.Shutdown(sctx))
		g.tls.Stop()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// lookup asks the server which service host reaches, reusing an answer
// for HostTTL.
func (g *Standalone) lookup(ctx context.Context, host string) (api.GatewayHost, bool) {
	now := time.Now()
	g.mu.Lock()
	a, cached := g.hosts[host]
	g.mu.Unlock()
	if cached && now.Before(a.expires) {
		return a.h, a.ok
	}
	h, err := g.opts.Server.GatewayHost(ctx, host)
	ok := err == nil
	if err != nil && !api.IsStatus(err, http.StatusNotFound) {
		g.opts.Log.Warn().Err(err).Str("host", host).Msg("standalone gateway: the server did not say which service the host reaches")
		return api.GatewayHost{}, false // not cached: the next request asks again
	}
	g.mu.Lock()
	if len(g.hosts) >= maxCachedHosts {
		g.hosts = map[string]hostAnswer{}
	}
	g.hosts[host] = hostAnswer{h: h, ok: ok, expires: now.Add(g.opts.HostTTL)}
	g.mu.Unlock()
	return h, ok
}

// allow is the certificate decision: a host the server says reaches one of
// the token's services, over HTTPS.
func (g *Standalone) allow(ctx context.Context, name string) error {
	if h, ok := g.lookup(ctx, name); ok && !h.Plain {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUnknownHost, name)
}

func (g *Standalone) plainHost(host string) bool {
	h, ok := g.lookup(context.Background(), host)
	return ok && h.Plain
}

// serve forwards a request for a service's host to the server's service
// path; any other host is a 404.
func (g *Standalone) serve(w http.ResponseWriter, r *http.Request) {
	h, ok := g.lookup(r.Context(), hostOnly(r.Host))
	if !ok {
		http.Error(w, "no service is served at this host", http.StatusNotFound)
		return
	}
	ctx := context.WithValue(r.Context(), gatewayHostKey{}, h)
	g.forward.ServeHTTP(w, r.WithContext(ctx))
}

type gatewayHostKey struct{}

// rewrite sends the request to /proxy/services/<project>/<run><path> on
// the server, with the caller's own headers (its token, if any, is what
// the service's auth checks) and X-Forwarded-* set.
func (g *Standalone) rewrite(pr *httputil.ProxyRequest) {
	h, _ := pr.In.Context().Value(gatewayHostKey{}).(api.GatewayHost)
	pr.SetURL(g.base)
	pr.Out.URL.Path = strings.TrimRight(g.base.Path, "/") + PathPrefix + h.Project + "/" + h.Run + pr.In.URL.Path
	pr.Out.URL.RawPath = ""
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery
	pr.SetXForwarded()
}

// debugLog sends an http.Server's own lines (TLS handshake errors of
// scanners and unknown names) to l at debug level.
func debugLog(l zerolog.Logger) *log.Logger {
	return log.New(debugWriter{l}, "", 0)
}

type debugWriter struct{ l zerolog.Logger }

func (d debugWriter) Write(p []byte) (int, error) {
	d.l.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}
