package daemon

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/proxy"
	"gpud.dev/gpud/store"
)

// gatewayResolver is the server's side of the gateway (proxy.Resolver):
// snapshots of services built from the store's in-memory indexes, never
// from a bbolt transaction. A snapshot is cached until the store changes
// a run, job or gateway (the change feed bumps a generation) or a
// replica's probes pass or fail (readinessChanged bumps it: probes are
// not store records), so the hot path is one map lookup: no run scan, no
// job read per request.
type gatewayResolver struct {
	s   *Server
	gen atomic.Uint64

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on each change
	cache   map[string]*cachedService
	models  map[string]*cachedModels // project -> its model services
	woken   map[string]time.Time     // service key -> its last scaleFromZero
}

// cachedService is a snapshot and the generation it was built in.
type cachedService struct {
	gen uint64
	svc *proxy.Service
}

// maxCachedServices bounds the cache; past it, it starts anew.
const maxCachedServices = 10_000

var (
	_ proxy.Resolver          = (*gatewayResolver)(nil)
	_ proxy.ServerCredentials = (*gatewayResolver)(nil)
)

func newGatewayResolver(s *Server) *gatewayResolver {
	return &gatewayResolver{s: s, changed: make(chan struct{}), cache: map[string]*cachedService{}, woken: map[string]time.Time{}}
}

// feedLoop bumps the generation on every change of a run, job or gateway,
// until ctx ends.
func (g *gatewayResolver) feedLoop(ctx context.Context, sub *store.Subscription) {
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-sub.C:
			if !ok {
				return
			}
			g.bump()
		}
	}
}

func (g *gatewayResolver) bump() {
	g.gen.Add(1)
	g.mu.Lock()
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

// ServiceByHost finds the active service whose host (<run>.<domain>) is
// host.
func (g *gatewayResolver) ServiceByHost(host string) (*proxy.Service, bool) {
	if svc, ok := g.cached("h:" + host); ok {
		return svc, true
	}
	gen := g.gen.Load()
	run, _, ok := g.s.hostAt(host) // cached too: an unknown name costs no scan
	if !ok {
		return nil, false
	}
	return g.build("h:"+host, gen, run)
}

// Service finds project's active service named run (or with that id).
func (g *gatewayResolver) Service(project, run string) (*proxy.Service, bool) {
	key := "p:" + project + "/" + run
	if svc, ok := g.cached(key); ok {
		return svc, true
	}
	gen := g.gen.Load()
	rec, err := g.s.runsAPI.findRun(project, run)
	if err != nil {
		return nil, false
	}
	return g.build(key, gen, rec)
}

// cached is the snapshot under key if no store change and no readiness
// change happened since it was built.
func (g *gatewayResolver) cached(key string) (*proxy.Service, bool) {
	g.mu.Lock()
	c := g.cache[key]
	g.mu.Unlock()
	if c == nil || c.gen != g.gen.Load() {
		return nil, false
	}
	return c.svc, true
}

// readinessChanged tells the gateway that a replica's probes passed or
// failed: the snapshots built before no longer hold.
func (s *Server) readinessChanged() {
	if s.gwResolver != nil {
		s.gwResolver.bump()
	}
}

// build makes run's snapshot and caches it under key (as of gen, read
// before the store was).
func (g *gatewayResolver) build(key string, gen uint64, run store.Record) (*proxy.Service, bool) {
	c, ok := g.snapshot(run)
	if !ok {
		return nil, false
	}
	c.gen = gen
	g.mu.Lock()
	if len(g.cache) >= maxCachedServices {
		g.cache = map[string]*cachedService{}
	}
	g.cache[key] = c
	g.mu.Unlock()
	return c.svc, true
}

// gatewayService is what the gateway reads of a service's configuration,
// decoded once per run record version.
type gatewayService struct {
	port        int
	rateLimits  []api.RateLimit
	model       *api.Model
	minReplicas int
	// router, when the service has a router group, is where its
	// replicas are: only they take the service's traffic (router_groups.go).
	router    routerGroup
	hasRouter bool
}

func gatewayServiceOf(r store.Record) (gatewayService, error) {
	rs, err := decodeSpec[runState](r)
	if err != nil || rs.Type != api.KindService || len(rs.Config) == 0 {
		return gatewayService{}, err
	}
	cfg, err := api.Parse("", rs.Config)
	if err != nil {
		return gatewayService{}, &corruptRecordError{Kind: r.Kind, ID: r.ID, Part: "spec", Err: err}
	}
	sv := cfg.Service
	if sv == nil {
		return gatewayService{}, nil
	}
	out := gatewayService{port: sv.Port.Container, rateLimits: sv.RateLimits, model: sv.Model, minReplicas: 1}
	switch {
	case len(sv.Replicas.Groups) > 0:
		out.minReplicas = 0
		for _, grp := range sv.Replicas.Groups {
			out.minReplicas += rangeMin(grp.Count)
		}
	case sv.Replicas.Count.Min != nil:
		out.minReplicas = *sv.Replicas.Count.Min
	}
	if out.router, out.hasRouter = routerOf(sv); out.hasRouter {
		out.minReplicas = out.router.hi - out.router.lo
	}
	return out, nil
}

// snapshot builds run's proxy.Service: ok false unless run is an active
// service.
func (g *gatewayResolver) snapshot(run store.Record) (*cachedService, bool) {
	s := g.s
	if finishedRun(run.Status) {
		return nil, false
	}
	rs, err := s.runSpec(run)
	if err != nil || rs.Type != api.KindService || rs.Stop {
		return nil, false
	}
	gs, err := cachedFor(s, run, "gateway", gatewayServiceOf)
	if err != nil {
		return nil, false // logged once per version by cachedFor
	}
	hosts, _ := s.serviceHosts(run.Project, run)
	svc := &proxy.Service{Project: run.Project, Run: run.Name, Hosts: hosts, Auth: !rs.OpenService, StripPrefix: !rs.KeepPrefix,
		RateLimits: gs.rateLimits, Model: gs.model, MinReplicas: gs.minReplicas, Status: run.Status}
	c := &cachedService{svc: svc}
	for _, j := range s.store.Jobs().ByRun(run.ID) {
		if j.Status != store.JobRunning {
			continue
		}
		if !s.replicaReady(j.ID) {
			continue
		}
		js, err := s.jobSpec(j)
		if err != nil {
			continue // logged once per version; the other replicas serve
		}
		if gs.hasRouter && !gs.router.isRouter(js.ReplicaNum) {
			continue // a worker: the router reaches it, the gateway does not
		}
		port, ok := replicaPort(js.Ports, gs.port)
		if !ok {
			continue
		}
		job := j
		svc.Replicas = append(svc.Replicas, proxy.Replica{ID: j.ID, Dial: func(ctx context.Context) (net.Conn, error) {
			return s.dialJobPort(ctx, job, port)
		}})
	}
	return c, true
}

// replicaPort is the container port of a replica that the gateway dials:
// the service's port, or else the first the job publishes.
func replicaPort(ports []api.JobPort, want int) (int, bool) {
	for _, p := range ports {
		if p.Container == want && want != 0 {
			return want, true
		}
	}
	for _, p := range ports {
		if p.Host != 0 {
			return p.Container, true
		}
	}
	return 0, false
}

// Models lists project's active services that declare a model (the
// model routes ask on each request): cached like the snapshots, so a
// project's runs are scanned once per store or readiness change.
func (g *gatewayResolver) Models(project string) []*proxy.Service {
	key := "m:" + project
	gen := g.gen.Load()
	g.mu.Lock()
	c := g.models[key]
	g.mu.Unlock()
	if c != nil && c.gen == gen {
		return c.svcs
	}
	var out []*proxy.Service
	for _, run := range g.s.store.Runs().ByProject(project) {
		if finishedRun(run.Status) {
			continue
		}
		if svc, ok := g.Service(project, run.ID); ok && svc.Model != nil {
			out = append(out, svc)
		}
	}
	g.mu.Lock()
	if g.models == nil || len(g.models) >= maxCachedServices {
		g.models = map[string]*cachedModels{}
	}
	g.models[key] = &cachedModels{gen: gen, svcs: out}
	g.mu.Unlock()
	return out
}

// cachedModels is a project's model services as of a generation.
type cachedModels struct {
	gen  uint64
	svcs []*proxy.Service
}

// Authorize lets through a member of svc's project, by the token in r's
// Authorization header, or a live per-service key of svc. The refusals are the API's: 401 without a valid
// token, 404 project_not_found for a non-member (project names do not
// leak).
func (g *gatewayResolver) Authorize(r *http.Request, svc *proxy.Service) error {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return apiErr(http.StatusUnauthorized, api.CodeUnauthorized, "", "service %s needs a token: send Authorization: Bearer <token> (gpud login, or GPUD_TOKEN)", svc.Run)
	}
	if strings.HasPrefix(token, api.ServiceKeyPrefix) {
		// A per-service key opens its own service only (service_keys.go);
		// a project-wide check (svc.Run "") never takes one.
		if g.s.serviceKeyOpens(token, svc.Project, svc.Run) {
			return nil
		}
		return apiErr(http.StatusUnauthorized, api.CodeUnauthorized, "", "the key is not valid for service %s (revoked, mistyped, or another service's)", svc.Run)
	}
	u, err := g.s.store.UserByToken(token)
	if err != nil {
		return apiErr(http.StatusUnauthorized, api.CodeUnauthorized, "", "the token is not valid (revoked or mistyped)")
	}
	role, err := g.s.projectRole(caller{name: u.Name, admin: u.Role == api.RoleAdmin}, svc.Project)
	if err != nil {
		return err
	}
	if roleRank(role) < roleRank(api.RoleUser) {
		return forbidden("service %s needs the user role in project %q", svc.Run, svc.Project)
	}
	return nil
}

// ServerCredential says whether r carries a gpud token (of anyone) or a
// live service key (of any service): neither reaches a service's code,
// whatever the service's auth.
func (g *gatewayResolver) ServerCredential(r *http.Request) bool {
	token, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !bearer || token == "" {
		return false
	}
	if strings.HasPrefix(token, api.ServiceKeyPrefix) {
		_, ok := g.s.serviceKeyValid(token)
		return ok
	}
	_, err := g.s.store.UserByToken(token)
	return err == nil
}

// coldWakeEvery spaces the scale-from-zero requests of one service while
// requests wait.
const coldWakeEvery = time.Second

// WaitReplica asks for a replica of svc (scaleFromZero) and waits until
// one is ready or ctx ends: the change feed wakes it on every job change,
// and a short poll sees probes pass.
func (g *gatewayResolver) WaitReplica(ctx context.Context, svc *proxy.Service) (*proxy.Service, error) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		g.mu.Lock()
		changed := g.changed
		wake := time.Since(g.woken[svc.Key()]) >= coldWakeEvery
		if wake {
			g.woken[svc.Key()] = time.Now()
		}
		g.mu.Unlock()
		if wake {
			if err := g.s.scaleFromZero(ctx, svc.Project, svc.Run); err != nil {
				return nil, err
			}
		}
		cur, ok := g.Service(svc.Project, svc.Run)
		if !ok {
			return nil, notFound("service", svc.Run)
		}
		if len(cur.Replicas) > 0 {
			return cur, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		case <-tick.C:
		}
	}
}
