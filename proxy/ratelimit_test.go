package proxy

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
)

// TestRateLimitAllowsTheBurstThenAnswers429: rps 0.5 with burst 2 lets
// three requests through at once, then answers 429 with Retry-After in
// whole seconds; the longest matching prefix decides; a header-keyed
// limit counts each header value apart; the replica never sees a refused
// request.
func TestRateLimitAllowsTheBurstThenAnswers429(t *testing.T) {
	b := newBackend(t, "b", nil)
	res := newResolver(&Service{Project: "p", Run: "s", StripPrefix: true, Replicas: []Replica{b.replica()}, MinReplicas: 1,
		RateLimits: []api.RateLimit{
			{Prefix: "/", Key: api.RateLimitKey{Type: "ip"}, RPS: 0.5, Burst: 2},
			{Prefix: "/free", Key: api.RateLimitKey{Type: "ip"}, RPS: 1000, Burst: 1000},
			{Prefix: "/keyed", Key: api.RateLimitKey{Type: "header", Header: "X-Api-Key"}, RPS: 0.001, Burst: 0},
		}})
	_, gw := newGateway(t, res, Options{})
	for i := range 3 {
		if code, body, _ := get(t, gw.URL+"/proxy/services/p/s/x"); code != 200 {
			t.Fatalf("request %d within the burst: %d %s", i, code, body)
		}
	}
	code, body, resp := get(t, gw.URL+"/proxy/services/p/s/x")
	if code != http.StatusTooManyRequests || !strings.Contains(body, CodeRateLimited) {
		t.Fatalf("past the burst: %d %q", code, body)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "1" && ra != "2" {
		t.Errorf("Retry-After %q, want 1 or 2 (a token every 2 s)", ra)
	}
	for range 20 {
		if code, _, _ := get(t, gw.URL+"/proxy/services/p/s/free/y"); code != 200 {
			t.Fatalf("/free has its own, looser limit: %d", code)
		}
	}
	for _, key := range []string{"alice", "bob"} {
		if code, _, _ := get(t, gw.URL+"/proxy/services/p/s/keyed", "X-Api-Key", key); code != 200 {
			t.Errorf("%s's first request: %d", key, code)
		}
	}
	code, _, resp = get(t, gw.URL+"/proxy/services/p/s/keyed", "X-Api-Key", "alice")
	if code != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1000" {
		t.Errorf("alice's second request: %d, Retry-After %q, want 429 and 1000", code, resp.Header.Get("Retry-After"))
	}
	if b.hits.Load() != 3+20+2 {
		t.Errorf("the replica saw %d requests, want %d", b.hits.Load(), 3+20+2)
	}
}

// TestRateLimitKeysOnTheConnectionNotOnXForwardedFor: a client cannot
// dodge an ip limit by sending X-Forwarded-For, unless the gateway is
// told it sits behind a trusted proxy; then the last entry counts.
func TestRateLimitKeysOnTheConnectionNotOnXForwardedFor(t *testing.T) {
	r := &http.Request{RemoteAddr: "10.0.0.1:5555", Header: http.Header{"X-Forwarded-For": {"1.1.1.1, 2.2.2.2"}}}
	if ip := clientIP(r, false); ip != "10.0.0.1" {
		t.Errorf("untrusted: %s", ip)
	}
	if ip := clientIP(r, true); ip != "2.2.2.2" {
		t.Errorf("trusted: %s", ip)
	}
	b := newBackend(t, "b", nil)
	res := newResolver(&Service{Project: "p", Run: "s", Replicas: []Replica{b.replica()}, MinReplicas: 1,
		RateLimits: []api.RateLimit{{Prefix: "/", Key: api.RateLimitKey{Type: "ip"}, RPS: 0.001}}})
	_, gw := newGateway(t, res, Options{})
	get(t, gw.URL+"/proxy/services/p/s/", "X-Forwarded-For", "3.3.3.3")
	if code, _, _ := get(t, gw.URL+"/proxy/services/p/s/", "X-Forwarded-For", "4.4.4.4"); code != http.StatusTooManyRequests {
		t.Errorf("a forged X-Forwarded-For bought a fresh bucket: %d", code)
	}
}

// TestRateLimitBucketsExpire: idle buckets are dropped once they would
// have refilled, so memory stays bounded by the active keys.
func TestRateLimitBucketsExpire(t *testing.T) {
	l := newLimiter()
	l.configure([]api.RateLimit{{Prefix: "/", Key: api.RateLimitKey{Type: "header", Header: "K"}, RPS: 10, Burst: 5}})
	now := time.Now()
	for i := range 100 {
		r := &http.Request{Header: http.Header{"K": {string(rune('a'+i%26)) + string(rune('a'+i/26))}}, RemoteAddr: "1.2.3.4:1"}
		l.allow(r, "/", &xffTrust{}, now)
	}
	if len(l.buckets) != 100 {
		t.Fatalf("%d buckets, want 100", len(l.buckets))
	}
	l.sweep(now.Add(30 * time.Second))
	if len(l.buckets) != 100 {
		t.Errorf("buckets idle 30 s were dropped: %d left", len(l.buckets))
	}
	l.sweep(now.Add(2 * bucketIdle))
	if len(l.buckets) != 0 {
		t.Errorf("%d buckets left after they went idle", len(l.buckets))
	}
}

// TestTrustedProxiesAloneMayNameTheClient: with TrustedProxies, the last
// X-Forwarded-For entry counts on a connection from a trusted network
// only; a client elsewhere that sends one is counted by its own address
// (two forged addresses share its one bucket).
func TestTrustedProxiesAloneMayNameTheClient(t *testing.T) {
	trust := &xffTrust{from: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	for addr, want := range map[string]bool{"10.1.2.3:80": true, "[::1]:80": true, "[::ffff:10.0.0.9]:80": true,
		"11.0.0.1:80": false, "127.0.0.1:80": false, "garbage": false} {
		if got := trust.trusts(addr); got != want {
			t.Errorf("trusts(%s) = %v, want %v", addr, got, want)
		}
	}
	b := newBackend(t, "b", nil)
	limits := []api.RateLimit{{Prefix: "/", Key: api.RateLimitKey{Type: "ip"}, RPS: 0.001}}
	// The test's client connects from 127.0.0.1: untrusted here...
	res := newResolver(&Service{Project: "p", Run: "s", Replicas: []Replica{b.replica()}, MinReplicas: 1, RateLimits: limits})
	_, gw := newGateway(t, res, Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	get(t, gw.URL+"/proxy/services/p/s/", "X-Forwarded-For", "3.3.3.3")
	if code, _, _ := get(t, gw.URL+"/proxy/services/p/s/", "X-Forwarded-For", "4.4.4.4"); code != http.StatusTooManyRequests {
		t.Errorf("an untrusted peer's X-Forwarded-For bought a fresh bucket: %d", code)
	}
	// ...and a trusted front proxy here: each client has its bucket.
	_, gw2 := newGateway(t, res, Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	for _, ip := range []string{"5.5.5.5", "6.6.6.6"} {
		if code, _, _ := get(t, gw2.URL+"/proxy/services/p/s/", "X-Forwarded-For", ip); code != http.StatusOK {
			t.Errorf("the first request of client %s behind a trusted proxy: %d", ip, code)
		}
	}
	if code, _, _ := get(t, gw2.URL+"/proxy/services/p/s/", "X-Forwarded-For", "5.5.5.5"); code != http.StatusTooManyRequests {
		t.Errorf("client 5.5.5.5's second request: %d, want 429", code)
	}
}
