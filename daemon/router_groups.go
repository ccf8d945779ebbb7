package daemon

import (
	"context"
	"errors"
	"fmt"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// A service's router replica group (dstack 0.20.17's prefill–decode
// disaggregation): one group is the router (SGLang's model gateway or
// NVIDIA Dynamo's frontend), the others its workers. The gateway sends
// the service's traffic to the router's replicas only (gateway_resolver.go
// asks routerReplicas); the server registers SGLang workers with the
// router (router_sync.go) and gives Dynamo's workers the router's address
// (routerEnv, at dispatch).

// Router types dstack knows.
const (
	routerSGLang = "sglang"
	routerDynamo = "dynamo"
)

// envRouterIP is the router replica's address that dstack gives Dynamo's
// workers (their etcd and NATS run on the router's host).
const envRouterIP = "DSTACK_ROUTER_INTERNAL_IP"

// routerGroup is where a service's router group sits among its replicas:
// replica numbers [lo, hi) are the router's (jobLayout numbers replicas
// group after group, and a group's count is fixed: a range is refused).
type routerGroup struct {
	typ    string
	lo, hi int
}

// routerOf is sv's router group; ok false for a service without one.
func routerOf(sv *api.ServiceSpec) (routerGroup, bool) {
	if sv == nil {
		return routerGroup{}, false
	}
	n := 0
	for _, g := range sv.Replicas.Groups {
		c := rangeMin(g.Count)
		if g.Router != nil {
			typ := g.Router.Type
			if typ == "" {
				typ = routerSGLang // dstack's default
			}
			return routerGroup{typ: typ, lo: n, hi: n + c}, true
		}
		n += c
	}
	return routerGroup{}, false
}

// isRouter reports whether replica number r is one of the router's.
func (g routerGroup) isRouter(r int) bool { return r >= g.lo && r < g.hi }

// errRouterNotPlaced defers a Dynamo worker until its router replica has a
// host (dstack's NOT_PROVISIONED): the resync dispatches it again.
var errRouterNotPlaced = errors.New("the router replica has no host yet")

// routerEnv adds DSTACK_ROUTER_INTERNAL_IP to the env of a worker of a
// service whose router group is Dynamo's, as dstack does: the address of
// the router replica's host (instanceAddress, as DSTACK_MASTER_NODE_IP).
// errRouterNotPlaced while the router has no host; another error when the
// router replica ended (the worker cannot reach a router that will not
// come back with the same address: dstack fails it).
func (s *dispatcher) routerEnv(ctx context.Context, j store.Record, js jobRecordSpec, env map[string]string) (map[string]string, error) {
	run, err := s.store.Runs().Get(j.Run)
	if err != nil {
		return env, nil // the run's record is gone: the job is being stopped
	}
	st, err := s.runSpec(run)
	if err != nil || st.Type != api.KindService {
		return env, nil
	}
	cfg, err := s.parsedServiceConfig(run, st)
	if err != nil || cfg.Service == nil {
		return env, nil
	}
	rg, ok := routerOf(cfg.Service)
	if !ok || rg.typ != routerDynamo || rg.isRouter(js.ReplicaNum) {
		return env, nil
	}
	if _, set := env[envRouterIP]; set {
		return env, nil
	}
	var router *store.Record
	for _, o := range s.store.Jobs().ByRun(j.Run) {
		os, err := s.jobSpec(o)
		if err != nil || os.Attempt != js.Attempt || !rg.isRouter(os.ReplicaNum) || os.Retired {
			continue
		}
		if router == nil || !finishedJob(o.Status) {
			router = &o
		}
	}
	if router == nil || finishedJob(router.Status) || router.Status == store.JobTerminating {
		return env, fmt.Errorf("the service's router replica ended, so the worker cannot learn its address (%s)", envRouterIP)
	}
	if router.Instance == "" {
		return env, errRouterNotPlaced
	}
	ip, err := s.instanceAddress(ctx, router.Instance)
	if err != nil {
		return env, err
	}
	out := make(map[string]string, len(env)+1)
	for k, v := range env {
		out[k] = v
	}
	out[envRouterIP] = ip
	return out, nil
}
