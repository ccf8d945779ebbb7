package proxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// serviceIdle is how long the gateway keeps the state (pools, buckets,
// counters) of a service it no longer sees requests for.
const serviceIdle = 10 * time.Minute

// downFor is how long a replica that refused a connection is passed over
// while another one is up.
const downFor = 2 * time.Second

// serviceState is what the gateway keeps per service: the last snapshot it
// saw, a keep-alive pool per replica, the rate limiters and the counters.
type serviceState struct {
	key      string
	g        *Gateway
	proxy    *httputil.ReverseProxy
	limits   *limiter
	requests *window
	inFlight atomic.Int64
	m        *serviceMetrics
	lastSeen atomic.Int64 // unix nanos

	snap     atomic.Pointer[Service]
	replicas atomic.Pointer[[]*replica] // the snapshot's replicas, in order
	rr       atomic.Uint64              // rotates the start of each pick

	mu   sync.Mutex          // guards byID and the updates of snap
	byID map[string]*replica // every replica of the current snapshot
}

// replica is one replica with its keep-alive pool.
type replica struct {
	id          string
	hostKey     string // the URL host of requests to it (its pool's key)
	target      atomic.Pointer[Replica]
	transport   *http.Transport // upgrades and large or streamed uploads
	pool        connPool        // everything else (upstream.go)
	dial        func(ctx context.Context) (net.Conn, error)
	outstanding atomic.Int64
	downUntil   atomic.Int64 // unix nanos
	removed     atomic.Bool
}

// state returns svc's state, brought up to svc's snapshot.
func (g *Gateway) state(svc *Service) *serviceState {
	g.mu.RLock()
	st := g.services[svc.Project+"/"+svc.Run] // no allocation for a lookup
	g.mu.RUnlock()
	if st == nil {
		key := svc.Key()
		g.mu.Lock()
		if st = g.services[key]; st == nil {
			st = g.newState(key)
			g.services[key] = st
		}
		g.mu.Unlock()
	}
	now := time.Now().UnixNano()
	st.lastSeen.Store(now)
	if st.snap.Load() != svc {
		st.update(svc)
	}
	if last := g.lastSweep.Load(); now-last > int64(time.Minute) && g.lastSweep.CompareAndSwap(last, now) {
		g.sweep(now)
	}
	return st
}

func (g *Gateway) newState(key string) *serviceState {
	st := &serviceState{key: key, g: g, limits: newLimiter(), requests: newWindow(g.opts.RateWindow),
		m: g.metrics.service(key), byID: map[string]*replica{}}
	st.replicas.Store(&[]*replica{})
	st.proxy = &httputil.ReverseProxy{
		Rewrite:       rewrite,
		Transport:     st,
		FlushInterval: -1, // SSE and streamed tokens reach the client as they come
		ErrorHandler:  st.proxyError,
		BufferPool:    bufferPool{},
	}
	return st
}

// sweep forgets services not seen for serviceIdle that serve nothing,
// closing their pools.
func (g *Gateway) sweep(now int64) {
	g.mu.Lock()
	var gone []*serviceState
	for key, st := range g.services {
		if now-st.lastSeen.Load() > int64(serviceIdle) && st.inFlight.Load() == 0 {
			delete(g.services, key)
			gone = append(gone, st)
		}
	}
	g.mu.Unlock()
	for _, st := range gone {
		st.closePools()
		g.metrics.forget(st.key)
	}
	g.mu.RLock()
	states := make([]*serviceState, 0, len(g.services))
	for _, st := range g.services {
		states = append(states, st)
	}
	g.mu.RUnlock()
	for _, st := range states {
		st.limits.sweep(time.Unix(0, now))
	}
}

// update takes a new snapshot: new replicas get a pool, replicas that
// left it have theirs closed.
func (st *serviceState) update(svc *Service) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.snap.Load() == svc {
		return
	}
	list := make([]*replica, 0, len(svc.Replicas))
	keep := make(map[string]*replica, len(svc.Replicas))
	for i := range svc.Replicas {
		target := svc.Replicas[i]
		rep := st.byID[target.ID]
		if rep == nil {
			rep = st.g.newReplica(target.ID, target.Addr)
		}
		rep.target.Store(&target)
		if _, dup := keep[target.ID]; dup {
			continue
		}
		keep[target.ID] = rep
		list = append(list, rep)
	}
	for id, rep := range st.byID {
		if keep[id] == nil {
			rep.removed.Store(true)
			rep.transport.CloseIdleConnections()
			rep.pool.close(true)
		}
	}
	st.byID = keep
	st.replicas.Store(&list)
	st.limits.configure(svc.RateLimits)
	st.snap.Store(svc)
}

// closePools closes the pools of a state the gateway forgot; a request
// that still holds it is served on new connections.
func (st *serviceState) closePools() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, rep := range st.byID {
		rep.removed.Store(true)
		rep.transport.CloseIdleConnections()
		rep.pool.close(true)
	}
}

func (g *Gateway) newReplica(id, addr string) *replica {
	rep := &replica{id: id, hostKey: addr}
	if rep.hostKey == "" {
		rep.hostKey = "replica"
	}
	dialer := &net.Dialer{Timeout: g.opts.DialTimeout, KeepAlive: 30 * time.Second}
	rep.dial = func(ctx context.Context) (net.Conn, error) {
		t := rep.target.Load()
		var c net.Conn
		var err error
		if t.Dial != nil {
			ctx, cancel := context.WithTimeout(ctx, g.opts.DialTimeout)
			defer cancel()
			c, err = t.Dial(ctx)
		} else {
			c, err = dialer.DialContext(ctx, "tcp", t.Addr)
		}
		if err != nil {
			return nil, &dialError{replica: id, err: err}
		}
		return c, nil
	}
	rep.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return rep.dial(ctx)
		},
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		// No ResponseHeaderTimeout: a model may think for minutes before
		// its first byte; the client's own deadline rules.
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true, // the client's Accept-Encoding goes through as sent
		ForceAttemptHTTP2:     false,
	}
	return rep
}

// pick is the replica with the fewest outstanding requests among those
// not tried yet, passing over replicas that recently refused a
// connection while another is up; ties go round-robin. nil when every
// replica was tried.
func (st *serviceState) pick(tried []*replica, now int64) *replica {
	list := *st.replicas.Load()
	n := len(list)
	if n == 0 {
		return nil
	}
	start := int(st.rr.Add(1) % uint64(n))
	var best, bestDown *replica
	for i := range n {
		rep := list[(start+i)%n]
		if len(tried) > 0 && slices.Contains(tried, rep) {
			continue
		}
		if rep.downUntil.Load() > now {
			if bestDown == nil || rep.outstanding.Load() < bestDown.outstanding.Load() {
				bestDown = rep
			}
			continue
		}
		if best == nil || rep.outstanding.Load() < best.outstanding.Load() {
			best = rep
		}
	}
	if best == nil {
		return bestDown
	}
	return best
}

// done is called when a request to rep ends (its response body closed).
func (rep *replica) done() {
	if rep.outstanding.Add(-1) == 0 && rep.removed.Load() {
		rep.transport.CloseIdleConnections()
		rep.pool.close(true)
	}
}

// bufferPool lends the reverse proxy its copy buffers.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32*1024); return &b }}

func (bufferPool) Get() []byte  { return *(copyBuffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }
