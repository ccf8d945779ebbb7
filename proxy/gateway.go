package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"gpud.dev/gpud/api"
)

// PathPrefix is where path routing starts: /proxy/services/<project>/<run>/...
const PathPrefix = "/proxy/services/"

// Error codes of the gateway's own answers (the body is an api.ServerError).
const (
	CodeNoReplica   = "no_replica"
	CodeRateLimited = "rate_limited"
	CodeBadGateway  = "bad_gateway"
)

// Defaults of Options.
const (
	DefaultColdStart   = 2 * time.Minute
	DefaultRateWindow  = 60 * time.Second
	DefaultDialTimeout = 10 * time.Second
)

// Options configure a Gateway. The zero value is usable.
type Options struct {
	// ColdStart bounds how long a request to a service that scaled to
	// zero waits for its first replica (default DefaultColdStart); past
	// it the request gets 503 no_replica.
	ColdStart time.Duration
	// TrustForwardedFor says the gateway sits behind a reverse proxy the
	// operator trusts: a rate limit keyed by ip then counts the last
	// address of X-Forwarded-For (the one that proxy added). Off, the
	// client IP is the connection's peer and X-Forwarded-For is ignored.
	TrustForwardedFor bool
	// TrustedProxies trusts X-Forwarded-For as TrustForwardedFor does,
	// but only on connections from these networks (the front proxies'
	// addresses); a client elsewhere is counted by its own address,
	// whatever it sends.
	TrustedProxies []netip.Prefix
	// RateWindow is the sliding window of Rate (default DefaultRateWindow).
	RateWindow time.Duration
	// DialTimeout bounds opening a connection to a replica (default
	// DefaultDialTimeout). Nothing bounds how long a replica takes to
	// answer or stream: model servers think for minutes.
	DialTimeout time.Duration
	// Registerer receives the gateway's metrics; nil: a registry of the
	// gateway's own, served by MetricsHandler.
	Registerer prometheus.Registerer
}

// ServerCredentials is an optional interface of a Resolver: it says
// whether r's Authorization header holds a credential of the server (a
// gpud token), which the gateway never passes to a service, whatever its
// auth. A Resolver without it: the gateway drops the header when
// Authorize accepts it.
type ServerCredentials interface {
	ServerCredential(r *http.Request) bool
}

// Gateway is the service gateway's request path: an http.Handler that
// routes by host, then by path, and forwards to a replica. Safe for
// concurrent use.
type Gateway struct {
	resolver Resolver
	opts     Options
	metrics  *metrics
	registry *prometheus.Registry // nil when Options.Registerer was given
	trust    xffTrust

	mu        sync.RWMutex
	services  map[string]*serviceState
	lastSweep atomic.Int64 // unix nanos of the last sweep of idle services
}

// New returns a gateway that knows services through res.
func New(res Resolver, opts Options) (*Gateway, error) {
	if opts.ColdStart <= 0 {
		opts.ColdStart = DefaultColdStart
	}
	if opts.RateWindow <= 0 {
		opts.RateWindow = DefaultRateWindow
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	g := &Gateway{resolver: res, opts: opts, services: map[string]*serviceState{},
		trust: xffTrust{all: opts.TrustForwardedFor, from: opts.TrustedProxies}}
	reg := opts.Registerer
	if reg == nil {
		g.registry = prometheus.NewRegistry()
		reg = g.registry
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("gateway metrics: %w", err)
	}
	g.metrics = m
	g.lastSweep.Store(time.Now().UnixNano())
	return g, nil
}

// ServeHTTP routes r to its service (Route) and serves it (ServeService);
// a request that reaches no service gets 404.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	svc, prefix, ok := g.Route(r)
	if !ok {
		writeError(w, http.StatusNotFound, api.CodeNotFound, "no service answers at %s%s", hostOf(r), r.URL.Path)
		return
	}
	g.ServeService(w, r, svc, prefix)
}

// Route finds the service r is for: by its host first, then by a path
// /proxy/services/<project>/<run>/... . prefix is the part of the path
// that names the service ("" for host routing).
func (g *Gateway) Route(r *http.Request) (svc *Service, prefix string, ok bool) {
	if host := hostOf(r); host != "" {
		if svc, ok := g.resolver.ServiceByHost(host); ok {
			return svc, "", true
		}
	}
	project, run, prefix, ok := ParsePath(r.URL.Path)
	if !ok {
		return nil, "", false
	}
	svc, ok = g.resolver.Service(project, run)
	return svc, prefix, ok
}

// ParsePath splits /proxy/services/<project>/<run>[/rest] into its
// project and run and the prefix that names them; ok false for any other
// path (or an empty project or run).
func ParsePath(path string) (project, run, prefix string, ok bool) {
	rest, found := strings.CutPrefix(path, PathPrefix)
	if !found {
		return "", "", "", false
	}
	project, rest, found = strings.Cut(rest, "/")
	if !found || project == "" {
		return "", "", "", false
	}
	run, _, _ = strings.Cut(rest, "/")
	if run == "" {
		return "", "", "", false
	}
	return project, run, PathPrefix + project + "/" + run, true
}

// hostOf is r's host, lower case, without a port.
func hostOf(r *http.Request) string {
	h := r.Host
	if strings.IndexByte(h, ':') >= 0 {
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// ServeService serves r for svc, which Route (or the caller's own
// routing) found; prefix is the part of r's path that named the service
// ("" when the host did). In order: rate limits, auth, a replica (waiting
// for the first one of a service scaled to zero), then the forward.
func (g *Gateway) ServeService(w http.ResponseWriter, r *http.Request, svc *Service, prefix string) {
	st := g.state(svc)
	start := time.Now()
	st.requests.add(start)
	st.inFlight.Add(1)
	st.m.inFlight.Inc()
	// One allocation for what the request carries along.
	one := &struct {
		rec statusRecorder
		f   forward
	}{rec: statusRecorder{ResponseWriter: w}}
	rec := &one.rec
	defer func() {
		st.inFlight.Add(-1)
		st.m.inFlight.Dec()
		st.m.observe(rec.code(), time.Since(start))
	}()

	rel := strings.TrimPrefix(r.URL.Path, prefix)
	if rel == "" || rel[0] != '/' {
		rel = "/" + rel
	}
	if wait, limited := st.limits.allow(r, rel, &g.trust, start); limited {
		secs := retryAfter(wait)
		rec.Header().Set("Retry-After", strconv.Itoa(secs))
		writeError(rec, http.StatusTooManyRequests, CodeRateLimited, "service %s: rate limit reached; retry after %d s", svc.Key(), secs)
		return
	}
	stripAuth := false
	if svc.Auth {
		if err := g.resolver.Authorize(r, svc); err != nil {
			writeAuthError(rec, err)
			return
		}
		stripAuth = true // the credential was ours, never the service's
	} else if r.Header.Get("Authorization") != "" {
		stripAuth = g.serverCredential(r, svc)
	}
	var coldUntil time.Time
	if len(svc.Replicas) == 0 {
		coldUntil = time.Now().Add(g.opts.ColdStart)
		ready, err := g.coldStart(r.Context(), svc)
		if err != nil {
			writeError(rec, http.StatusServiceUnavailable, CodeNoReplica, "%v", err)
			return
		}
		svc, st = ready, g.state(ready)
	}
	f := &one.f
	*f = forward{prefix: prefix, strip: svc.StripPrefix && prefix != "", stripAuth: stripAuth, coldUntil: coldUntil}
	if fastEligible(r) {
		st.serveFast(rec, r, f)
		return
	}
	st.proxy.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), forwardKey{}, f)))
}

// Forward serves r for svc with r's path as the replica sees it (as a
// host-routed request): rate limits, auth, a replica, the forward. It
// makes the Gateway a Forwarder for the model routes.
func (g *Gateway) Forward(w http.ResponseWriter, r *http.Request, svc *Service) {
	g.ServeService(w, r, svc, "")
}

var _ Forwarder = (*Gateway)(nil)

// serverCredential says whether r's Authorization header is a gpud
// credential (see ServerCredentials).
func (g *Gateway) serverCredential(r *http.Request, svc *Service) bool {
	if sc, ok := g.resolver.(ServerCredentials); ok {
		return sc.ServerCredential(r)
	}
	return g.resolver.Authorize(r, svc) == nil
}

// coldStart waits, up to Options.ColdStart, for a replica of svc, which
// has none.
func (g *Gateway) coldStart(ctx context.Context, svc *Service) (*Service, error) {
	if svc.MinReplicas > 0 {
		status := svc.Status
		if status == "" {
			status = "unknown"
		}
		return nil, fmt.Errorf("service %s has no ready replica (run status %s); retry once a replica is running", svc.Key(), status)
	}
	ctx, cancel := context.WithTimeout(ctx, g.opts.ColdStart)
	defer cancel()
	ready, err := g.resolver.WaitReplica(ctx, svc)
	if err == nil && ready != nil && len(ready.Replicas) > 0 {
		return ready, nil
	}
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("service %s scaled to zero and no replica became ready within %s; retry later", svc.Key(), g.opts.ColdStart)
	}
	return nil, fmt.Errorf("service %s scaled to zero and its first replica did not start: %v", svc.Key(), err)
}

// Rate is the request rate of the service (Service.Key) in requests per
// second over the last Options.RateWindow (counting every request the
// gateway received for it, refused ones included); 0 for a service the
// gateway has not seen.
func (g *Gateway) Rate(serviceKey string) float64 {
	st := g.lookup(serviceKey)
	if st == nil {
		return 0
	}
	return st.requests.rate(time.Now())
}

// InFlight is the number of the service's requests the gateway is
// serving now (open streams and WebSockets included).
func (g *Gateway) InFlight(serviceKey string) int {
	st := g.lookup(serviceKey)
	if st == nil {
		return 0
	}
	return int(st.inFlight.Load())
}

func (g *Gateway) lookup(key string) *serviceState {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.services[key]
}

// writeError sends an api.ServerError.
func writeError(w http.ResponseWriter, status int, code, format string, args ...any) {
	writeServerError(w, &api.ServerError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)})
}

func writeServerError(w http.ResponseWriter, se *api.ServerError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(se.Status)
	// An error here is the client gone: nothing is left to tell it.
	_ = json.NewEncoder(w).Encode(se)
}

// writeAuthError sends a Resolver.Authorize refusal: its own status when
// it is an *api.ServerError, else 401.
func writeAuthError(w http.ResponseWriter, err error) {
	var se *api.ServerError
	if errors.As(err, &se) && se.Status != 0 {
		writeServerError(w, se)
		return
	}
	writeError(w, http.StatusUnauthorized, api.CodeUnauthorized, "this service needs a token: send Authorization: Bearer <token> (%v)", err)
}
