package daemon

import "gpud.dev/gpud/api"

// gatewayRefusal is why the gateway's fields wait: services are served by
// the server's own proxy until the gateway lands.
func gatewayRefusal(what string) *refusal {
	return &refusal{Why: what + " needs a gateway, and gpud has none yet: services are reachable at /proxy/services/PROJECT/RUN/ on the server",
		Instead: "drop it; the server's proxy serves the service, with the project's tokens as its auth"}
}

// serviceRules are a service's own fields: the gateway serves the
// service (api_proxy.go, gateway_*.go), and the service loop keeps its
// replicas: probes, autoscaling, rolling updates (autoscale.go,
// probes.go, rollout.go).
var serviceRules = fieldRules{
	"service:commands":     {Proof: []string{"daemon.TestServiceFieldsTakeEffectThroughTheProxy"}},
	"service:port":         {Proof: []string{"daemon.TestServiceFieldsTakeEffectThroughTheProxy"}, Note: serviceNote},
	"service:strip_prefix": {Proof: []string{"daemon.TestServiceFieldsTakeEffectThroughTheProxy"}},
	"service:auth":         {Proof: []string{"daemon.TestServiceFieldsTakeEffectThroughTheProxy"}},
	"service:gateway": {Proof: []string{"daemon.TestServiceFieldsTakeEffectThroughTheProxy", "daemon.TestGatewayServesServiceOverHTTPSWithACertificateFromPebble"},
		Check: checkServiceGateway},
	// https: true is the default; false and auto serve the service over
	// plain HTTP on the gateway's HTTP listener (auto: when its gateway
	// has certificate: none), as api_gateways.go's serviceHosts says.
	"service:https": {Proof: []string{"daemon.TestGatewayWithoutCertificateServesPlainHTTP"}},
	// domains (a gpud extension): the service's own hostnames, routed
	// and certified by the gateway (service_domains.go).
	"service:domains":     {Proof: []string{"daemon.TestServiceCustomDomainIsServedWithItsOwnCertificate"}, Check: checkServiceDomains},
	"service:scaling":     {Subtree: true, Proof: []string{"daemon.TestServiceAutoscalesOnRequestRate", "daemon.TestServiceScalesUpUnderLoad", "daemon.TestServiceScalesToZeroAndWakesOnRequest"}},
	"service:rate_limits": {Subtree: true, Proof: rateLimitProof},
	"service:probes":      {Subtree: true, Proof: []string{"daemon.TestServiceRollingUpdateKeepsTheOldVersionWhenProbesFail"}},
	"service:replicas": {Proof: []string{"daemon.TestServiceFieldsTakeEffectThroughTheProxy", "daemon.TestServiceAutoscalesOnRequestRate"},
		Check: func(fc *fieldCheck, _ string) *refusal {
			for _, g := range fc.cfg.Service.Replicas.Groups {
				if isRangeCount(g.Count) {
					return &refusal{Why: "a replica group's range needs autoscaling per group, which gpud does not do yet (a service's own `replicas: a..b` is autoscaled)",
						Instead: "give each group a fixed count"}
				}
			}
			return nil
		}},
	"service:replicas.name":     {Proof: []string{"daemon.TestServiceReplicaGroupsRunTheirOwnCommands"}},
	"service:replicas.count":    {Proof: []string{"daemon.TestServiceReplicaGroupsRunTheirOwnCommands"}},
	"service:replicas.image":    {Proof: []string{"daemon.TestServiceReplicaGroupsRunTheirOwnCommands"}},
	"service:replicas.env":      {Proof: []string{"daemon.TestServiceReplicaGroupsRunTheirOwnCommands"}},
	"service:replicas.commands": {Proof: []string{"daemon.TestServiceReplicaGroupsRunTheirOwnCommands"}},
	"service:replicas.python": {All: &refusal{Why: "a replica group's own python is not applied yet",
		Instead: "set python for the whole service, or give the group an image with that Python"}},
	"service:replicas.nvcc": {All: &refusal{Why: "a replica group's own nvcc is not applied yet",
		Instead: "give the group an image with the CUDA compiler"}},
	"service:replicas.docker": {All: &refusal{Why: "Docker-in-Docker replica groups are not supported yet", Instead: "drop docker"}},
	"service:replicas.scaling": {All: &refusal{Why: "autoscaling per replica group is not done yet (a service's own `replicas: a..b` with `scaling` is autoscaled)",
		Instead: "give each group a fixed count, or use one group of replicas with `replicas: a..b` and `scaling`"}},
}

// rateLimitProof shows rate_limits in effect: the server's gateway (429
// with Retry-After past the burst, a prefix's own limit) and the gateway
// package (the longest prefix, ip and header keys).
var rateLimitProof = []string{"daemon.TestServiceRateLimitsAnswer429ThroughTheGateway", "proxy.TestRateLimitAllowsTheBurstThenAnswers429",
	"proxy.TestRateLimitKeysOnTheConnectionNotOnXForwardedFor"}

func isRangeCount(r api.Range[int]) bool {
	return r.Min == nil || r.Max == nil || *r.Min != *r.Max
}

// serviceNote tells, in the plan, where the service will be reachable.
func serviceNote(fc *fieldCheck) string {
	name := fc.cfg.Name()
	if name == "" {
		name = "RUN"
	}
	return "no gateway: the service is reachable at /proxy/services/" + fc.project + "/" + name + "/ on this server"
}
