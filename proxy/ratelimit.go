package proxy

import (
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"gpud.dev/gpud/api"
)

// maxBuckets bounds the token buckets one service keeps. Past it (a flood
// of distinct keys) idle buckets are dropped first; if none is idle, new
// keys share one bucket per rule, so memory stays bounded and the limit
// still holds.
const maxBuckets = 100_000

// bucketIdle is the least time an idle bucket is kept; a bucket is kept
// at least until it would have refilled, so forgetting it gives no client
// more than its burst.
const bucketIdle = time.Minute

// limiter applies a service's rate_limits: a token bucket per rule and
// key (client IP or a header's value); the rule with the longest prefix
// matching the path decides.
type limiter struct {
	rules atomic.Pointer[ruleSet]

	mu      sync.Mutex
	buckets map[bucketKey]*bucket
}

type ruleSet struct {
	src   []api.RateLimit
	rules []rule // longest prefix first
}

type rule struct {
	id     int
	prefix string
	key    api.RateLimitKey
	limit  rate.Limit
	burst  int
	idle   time.Duration
}

type bucketKey struct {
	rule int
	key  string
}

type bucket struct {
	lim  *rate.Limiter
	last time.Time
}

func newLimiter() *limiter {
	l := &limiter{buckets: map[bucketKey]*bucket{}}
	l.rules.Store(&ruleSet{})
	return l
}

// configure takes a service's rate_limits; buckets start anew when they
// change.
func (l *limiter) configure(rls []api.RateLimit) {
	if cur := l.rules.Load(); slices.Equal(cur.src, rls) {
		return
	}
	rs := &ruleSet{src: slices.Clone(rls)}
	for i, rl := range rls {
		prefix := rl.Prefix
		if prefix == "" {
			prefix = "/"
		}
		// burst is what a client may send beyond the rate, as nginx's
		// limit_req burst with nodelay (dstack's gateway): the bucket
		// holds the one request the rate allows now, plus burst.
		size := rl.Burst + 1
		r := rule{id: i, prefix: prefix, key: rl.Key, limit: rate.Limit(rl.RPS), burst: size, idle: bucketIdle}
		if rl.RPS > 0 {
			if refill := time.Duration(float64(size) / rl.RPS * float64(time.Second)); refill > r.idle {
				r.idle = refill
			}
		}
		rs.rules = append(rs.rules, r)
	}
	sort.SliceStable(rs.rules, func(i, j int) bool { return len(rs.rules[i].prefix) > len(rs.rules[j].prefix) })
	l.mu.Lock()
	l.buckets = map[bucketKey]*bucket{}
	l.rules.Store(rs)
	l.mu.Unlock()
}

// allow takes a token for r, whose path relative to the service is path.
// limited true: refused, and a token will be there after wait.
func (l *limiter) allow(r *http.Request, path string, trust *xffTrust, now time.Time) (wait time.Duration, limited bool) {
	rs := l.rules.Load()
	if len(rs.rules) == 0 {
		return 0, false
	}
	var ru *rule
	for i := range rs.rules {
		if strings.HasPrefix(path, rs.rules[i].prefix) {
			ru = &rs.rules[i]
			break
		}
	}
	if ru == nil {
		return 0, false
	}
	k := bucketKey{rule: ru.id}
	if ru.key.Type == "header" {
		k.key = r.Header.Get(ru.key.Header)
	} else {
		k.key = clientIP(r, trust.trusts(r.RemoteAddr))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rules.Load() != rs { // reconfigured meanwhile: the new rules next time
		return 0, false
	}
	b := l.buckets[k]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.sweepLocked(now)
			if len(l.buckets) >= maxBuckets {
				k.key = "\x00overflow"
			}
		}
		if b = l.buckets[k]; b == nil {
			b = &bucket{lim: rate.NewLimiter(ru.limit, ru.burst)}
			l.buckets[k] = b
		}
	}
	b.last = now
	res := b.lim.ReserveN(now, 1)
	if !res.OK() {
		return time.Second, true
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, true
	}
	return 0, false
}

// sweep drops buckets idle long enough to have refilled.
func (l *limiter) sweep(now time.Time) {
	l.mu.Lock()
	l.sweepLocked(now)
	l.mu.Unlock()
}

func (l *limiter) sweepLocked(now time.Time) {
	rs := l.rules.Load()
	for k, b := range l.buckets {
		idle := bucketIdle
		for _, ru := range rs.rules {
			if ru.id == k.rule {
				idle = ru.idle
			}
		}
		if now.Sub(b.last) > idle {
			delete(l.buckets, k)
		}
	}
}

// xffTrust is whose X-Forwarded-For the gateway believes: every peer's
// (Options.TrustForwardedFor) or those of the proxies in front of it
// (Options.TrustedProxies).
type xffTrust struct {
	all  bool
	from []netip.Prefix
}

// trusts says whether the peer at remoteAddr (host:port) is trusted.
func (t *xffTrust) trusts(remoteAddr string) bool {
	if t.all || len(t.from) == 0 {
		return t.all
	}
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	for _, p := range t.from {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// clientIP is the address a rate limit keyed by ip counts: the
// connection's peer, or behind a trusted proxy the last X-Forwarded-For
// entry (the one that proxy added; earlier ones are the client's word).
func clientIP(r *http.Request, trustXFF bool) string {
	if trustXFF {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			last := xff[len(xff)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			if ip := strings.TrimSpace(last); ip != "" {
				return ip
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// retryAfter is the whole seconds a client waits for wait (at least 1).
func retryAfter(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}
