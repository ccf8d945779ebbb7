package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gpud.dev/gpud/internal/testutil"
)

// TestRoutesByHostThenByPath: a known host reaches its service whatever
// the path; /proxy/services/<project>/<run>/ reaches the service by path
// with the prefix stripped (strip_prefix) or kept; an unknown host or
// service gets 404, never another service.
func TestRoutesByHostThenByPath(t *testing.T) {
	web, api := newBackend(t, "web", nil), newBackend(t, "api", nil)
	res := newResolver(
		&Service{Project: "main", Run: "web", Hosts: []string{"web.example.test"}, StripPrefix: true, Replicas: []Replica{web.replica()}, MinReplicas: 1},
		&Service{Project: "main", Run: "api", Hosts: []string{"api.example.test"}, StripPrefix: false, Replicas: []Replica{api.replica()}, MinReplicas: 1},
	)
	_, gw := newGateway(t, res, Options{})
	tests := []struct {
		name, path, host string
		code             int
		body             string
	}{
		{"host routing keeps the path", "/v1/models?x=1", "web.example.test", 200, "web /v1/models?x=1 auth= host=web.example.test"},
		{"host is case-insensitive, port ignored", "/a", "WEB.example.test:8443", 200, "web /a "},
		{"host wins over a path naming another service", "/proxy/services/main/api/x", "web.example.test", 200, "web /proxy/services/main/api/x "},
		{"path routing strips the prefix", "/proxy/services/main/web/v1/chat", "", 200, "web /v1/chat "},
		{"path routing to the bare prefix", "/proxy/services/main/web/", "", 200, "web / "},
		{"escaped bytes survive the strip", "/proxy/services/main/web/a%2Fb%20c", "", 200, "web /a%2Fb%20c "},
		{"strip_prefix false keeps the path", "/proxy/services/main/api/v1", "", 200, "api /proxy/services/main/api/v1 "},
		{"unknown host", "/", "nope.example.test", 404, `"code":"not_found"`},
		{"unknown service", "/proxy/services/main/nope/", "", 404, `"code":"not_found"`},
		{"another project's name", "/proxy/services/other/web/", "", 404, `"code":"not_found"`},
		{"no run", "/proxy/services/main/", "", 404, `"code":"not_found"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h []string
			if tt.host != "" {
				h = []string{"Host", tt.host}
			}
			code, body, _ := get(t, gw.URL+tt.path, h...)
			if code != tt.code || !strings.Contains(body, tt.body) {
				t.Errorf("GET %s (host %q): %d %q, want %d containing %q", tt.path, tt.host, code, body, tt.code, tt.body)
			}
		})
	}
}

// TestAuthGuardsAServiceAndNeverLeaksTheToken: auth: true answers 401 with
// a JSON error without a valid token and never passes the token on;
// auth: false lets anyone in, passes the service's own Authorization,
// and drops a server token.
func TestAuthGuardsAServiceAndNeverLeaksTheToken(t *testing.T) {
	b := newBackend(t, "b", nil)
	res := newResolver(
		&Service{Project: "p", Run: "closed", Auth: true, StripPrefix: true, Replicas: []Replica{b.replica()}, MinReplicas: 1},
		&Service{Project: "p", Run: "open", Auth: false, StripPrefix: true, Replicas: []Replica{b.replica()}, MinReplicas: 1},
	)
	_, gw := newGateway(t, res, Options{})
	code, body, resp := get(t, gw.URL+"/proxy/services/p/closed/x")
	if code != http.StatusUnauthorized || !strings.Contains(body, `"code":"unauthorized"`) || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("no token: %d %q", code, body)
	}
	if code, _, _ = get(t, gw.URL+"/proxy/services/p/closed/x", "Authorization", "Bearer bad"); code != http.StatusUnauthorized {
		t.Errorf("a bad token: %d", code)
	}
	if code, body, _ = get(t, gw.URL+"/proxy/services/p/closed/x", "Authorization", "Bearer good"); code != 200 || !strings.Contains(body, "auth= ") {
		t.Errorf("a good token: %d %q (the token must not reach the service)", code, body)
	}
	if code, body, _ = get(t, gw.URL+"/proxy/services/p/open/x"); code != 200 {
		t.Errorf("open, no token: %d %q", code, body)
	}
	if _, body, _ = get(t, gw.URL+"/proxy/services/p/open/x", "Authorization", "Bearer app-key"); !strings.Contains(body, "auth=Bearer app-key") {
		t.Errorf("the service's own key did not reach it: %q", body)
	}
	if _, body, _ = get(t, gw.URL+"/proxy/services/p/open/x", "Authorization", "Bearer good"); strings.Contains(body, "good") {
		t.Errorf("a server token reached an open service: %q", body)
	}
	if b.hits.Load() != 4 {
		t.Errorf("the replica saw %d requests, want 4 (refused ones never reach it)", b.hits.Load())
	}
}

// TestColdStartWaitsForTheFirstReplica: a service scaled to zero holds a
// request until WaitReplica brings a replica; past the bound it answers
// 503 saying so; a service that should have replicas but has none
// answers 503 naming its status at once.
func TestColdStartWaitsForTheFirstReplica(t *testing.T) {
	b := newBackend(t, "b", nil)
	res := newResolver(
		&Service{Project: "p", Run: "zero", StripPrefix: true},
		&Service{Project: "p", Run: "down", StripPrefix: true, MinReplicas: 1, Status: "provisioning"},
	)
	res.waiting = make(chan *Service) // the send below waits for the request's WaitReplica
	_, gw := newGateway(t, res, Options{ColdStart: time.Minute})
	go func() {
		res.waiting <- &Service{Project: "p", Run: "zero", StripPrefix: true, Replicas: []Replica{b.replica()}}
	}()
	if code, body, _ := get(t, gw.URL+"/proxy/services/p/zero/hi"); code != 200 || !strings.HasPrefix(body, "b /hi") {
		t.Errorf("cold start: %d %q", code, body)
	}
	code, body, _ := get(t, gw.URL+"/proxy/services/p/down/")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "provisioning") || !strings.Contains(body, CodeNoReplica) {
		t.Errorf("no replica, min 1: %d %q", code, body)
	}

	// The first replica of a cold start may not listen yet: refused
	// connections are retried within the bound.
	var dials atomic.Int64
	starting := Replica{ID: "starting", Dial: func(ctx context.Context) (net.Conn, error) {
		if dials.Add(1) <= 3 {
			return nil, errors.New("connection refused")
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", b.replica().Addr)
	}}
	res.set(&Service{Project: "p", Run: "zero", StripPrefix: true})
	go func() {
		res.waiting <- &Service{Project: "p", Run: "zero", StripPrefix: true, Replicas: []Replica{starting}}
	}()
	if code, body, _ := get(t, gw.URL+"/proxy/services/p/zero/up"); code != 200 || !strings.HasPrefix(body, "b /up") || dials.Load() != 4 {
		t.Errorf("cold start on a replica that listens late: %d %q after %d dials", code, body, dials.Load())
	}

	res2 := newResolver(&Service{Project: "p", Run: "zero"})
	_, gw2 := newGateway(t, res2, Options{ColdStart: 100 * time.Millisecond})
	code, body, _ = get(t, gw2.URL+"/proxy/services/p/zero/")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no replica became ready within 100ms") {
		t.Errorf("cold start past the bound: %d %q", code, body)
	}
}

// TestRateAndInFlightCountRequests: the autoscaler's inputs count every
// request of a service, and in-flight ones while they last.
func TestRateAndInFlightCountRequests(t *testing.T) {
	release := make(chan struct{})
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
	})
	res := newResolver(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{b.replica()}, MinReplicas: 1})
	g, gw := newGateway(t, res, Options{})
	for range 5 {
		get(t, gw.URL+"/proxy/services/p/s/")
	}
	if r := g.Rate("p/s"); r <= 0 || r > 5 {
		t.Errorf("Rate after 5 requests: %v, want in (0, 5]", r)
	}
	if g.Rate("p/none") != 0 || g.InFlight("p/none") != 0 {
		t.Error("an unknown service has a rate")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get(gw.URL + "/proxy/services/p/s/hold")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { return g.InFlight("p/s") == 1 })
	close(release)
	<-done
	waitFor(t, func() bool { return g.InFlight("p/s") == 0 })
}

// TestMetricsCountRequestsByServiceAndStatus: the Prometheus text has the
// requests by code, the latency histogram and the in-flight gauge.
func TestMetricsCountRequestsByServiceAndStatus(t *testing.T) {
	b := newBackend(t, "b", nil)
	res := newResolver(&Service{Project: "p", Run: "s", Auth: true, StripPrefix: true, Replicas: []Replica{b.replica()}, MinReplicas: 1})
	g, gw := newGateway(t, res, Options{})
	get(t, gw.URL+"/proxy/services/p/s/", "Authorization", "Bearer good")
	get(t, gw.URL+"/proxy/services/p/s/")
	rec := &bodyRecorder{header: http.Header{}}
	req, err := http.NewRequestWithContext(context.Background(), "GET", "/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	g.MetricsHandler().ServeHTTP(rec, req)
	text := rec.body.String()
	for _, want := range []string{
		`gpud_gateway_requests_total{code="200",project="p",run="s"} 1`,
		`gpud_gateway_requests_total{code="401",project="p",run="s"} 1`,
		`gpud_gateway_request_duration_seconds_count{project="p",run="s"} 2`,
		`gpud_gateway_in_flight_requests{project="p",run="s"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s:\n%s", want, text)
		}
	}
}

type bodyRecorder struct {
	header http.Header
	body   strings.Builder
	code   int
}

func (r *bodyRecorder) Header() http.Header         { return r.header }
func (r *bodyRecorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *bodyRecorder) WriteHeader(code int)        { r.code = code }

// waitFor waits up to 10 s for cond.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() error {
		if !cond() {
			return errors.New("condition not met")
		}
		return nil
	})
}

// TestIdleServicesAreForgotten: the gateway drops the state and the
// metric series of a service it has not seen for serviceIdle (its pools
// closed), and serves it anew on its next request.
func TestIdleServicesAreForgotten(t *testing.T) {
	b := newBackend(t, "b", nil)
	res := newResolver(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{b.replica()}, MinReplicas: 1})
	g, gw := newGateway(t, res, Options{})
	get(t, gw.URL+"/proxy/services/p/s/")
	g.sweep(time.Now().Add(serviceIdle + time.Minute).UnixNano())
	if g.lookup("p/s") != nil {
		t.Fatal("an idle service's state was kept")
	}
	waitFor(t, func() bool { return b.closed.Load() >= 1 }) // its pool closed
	if code, _, _ := get(t, gw.URL+"/proxy/services/p/s/"); code != 200 || g.Rate("p/s") <= 0 {
		t.Errorf("after the sweep: %d, rate %v", code, g.Rate("p/s"))
	}
}
