package api

import (
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// Routers for prefill–decode disaggregation. dstack 0.20.17 moved the
// router into a replica group of the service (Router); the older places,
// a service-level router (ServiceRouter) and a router on the gateway
// (GatewayRouter), are still read so that a configuration written for
// dstack 0.20 gets a plan that names them, rather than "unknown field".

// RouterTypes are the routers a replica group may run: SGLang's model
// gateway (dstack registers the workers with it) or NVIDIA Dynamo's
// frontend (its workers find it through etcd and NATS).
var RouterTypes = []string{"sglang", "dynamo"}

// RouterPolicies are the SGLang router's routing policies.
var RouterPolicies = []string{"random", "round_robin", "cache_aware", "power_of_two"}

// ServiceRouter is dstack 0.20's service-level router: the gateway's
// SGLang router in front of the service's replicas. dstack dropped it in
// 0.21 for a router replica group.
type ServiceRouter struct {
	Type             string `json:"type"`   // sglang
	Policy           string `json:"policy"` // one of RouterPolicies
	PDDisaggregation bool   `json:"pd_disaggregation,omitempty"`
}

// GatewayRouter is dstack 0.20's router on a gateway, which a service's
// router used. dstack dropped it in 0.21.
type GatewayRouter struct {
	Type   string `json:"type"`   // sglang
	Policy string `json:"policy"` // one of RouterPolicies
}

// groupRouter decodes a replica group's router: {type: sglang | dynamo},
// sglang when the type is left out, as in dstack.
func (d *decoder) groupRouter(n ast.Node, path string) *Router {
	rt := &Router{Type: "sglang"}
	d.objectWith(n, path, "a router", func(key string, n ast.Node, p string) bool {
		if key != "type" {
			return false
		}
		rt.Type, _ = d.oneOf(n, p, RouterTypes...)
		return true
	}, func() []string { return []string{"type"} })
	return rt
}

// serviceRouter decodes a service-level router (dstack 0.20).
func (d *decoder) serviceRouter(n ast.Node, path string) *ServiceRouter {
	rt := &ServiceRouter{Type: "sglang", Policy: "cache_aware"}
	d.object(n, path, "a router", fields{
		"type":              func(n ast.Node, p string) { rt.Type, _ = d.oneOf(n, p, "sglang") },
		"policy":            func(n ast.Node, p string) { rt.Policy, _ = d.oneOf(n, p, RouterPolicies...) },
		"pd_disaggregation": func(n ast.Node, p string) { rt.PDDisaggregation, _ = d.boolean(n, p) },
	})
	return rt
}

// gatewayRouter decodes a gateway's router (dstack 0.20).
func (d *decoder) gatewayRouter(n ast.Node, path string) *GatewayRouter {
	rt := &GatewayRouter{Type: "sglang", Policy: "cache_aware"}
	d.object(n, path, "a router", fields{
		"type":   func(n ast.Node, p string) { rt.Type, _ = d.oneOf(n, p, "sglang") },
		"policy": func(n ast.Node, p string) { rt.Policy, _ = d.oneOf(n, p, RouterPolicies...) },
	})
	return rt
}

// checkRouters applies dstack's rules to a service's routers: one router
// group at most, with exactly one replica (dstack: "For now replica group
// with router must have count: 1"), and never both a router group and a
// service-level router. groups are the fields each group sets, in the
// order of s.Replicas.Groups; present is the service's own fields.
func (d *decoder) checkRouters(s *ServiceSpec, groups []map[string]ast.Node, present map[string]ast.Node, groupsPath string) {
	routers := 0
	for i, g := range s.Replicas.Groups {
		if g.Router == nil || i >= len(groups) {
			continue
		}
		p := index(groupsPath, i)
		routers++
		if routers > 1 {
			d.errorAt(groups[i]["router"], join(p, "router"), "a service has one router group at most", "keep `router:` on one replica group; the others are its workers")
		}
		if g.Count.Min == nil || g.Count.Max == nil || *g.Count.Min != 1 || *g.Count.Max != 1 {
			d.errorAt(groups[i]["count"], join(p, "count"), "a router group runs exactly one replica", "set `count: 1` on the router group")
		}
	}
	if routers > 0 && s.Router != nil {
		d.errorAt(present["router"], "router", "a service-level router and a router replica group exclude each other", "drop the service-level `router:`; the router group serves the traffic")
	}
}

// aliasKeys makes the fields written under from (dstack 0.20's spelling,
// like groups) findable under to (the field they fill, like replicas), so
// the plan's errors about them point at the lines written.
func (d *decoder) aliasKeys(from, to string) {
	for k, e := range d.keys {
		rest, ok := strings.CutPrefix(k, from)
		if !ok || (rest != "" && rest[0] != '.' && rest[0] != '[') {
			continue
		}
		if _, taken := d.keys[to+rest]; taken {
			continue
		}
		alias := *e
		alias.Path = to + rest
		d.keys[to+rest] = &alias
	}
}
