package daemon

import "gpud.dev/gpud/proxy"

// routerRules are a service's model and router fields, and the other
// fields dstack 0.20 added: the model is served on the project's
// OpenAI-compatible endpoint; the routers of prefill–decode
// disaggregation: dstack 0.20.17's router replica group is honoured
// (router_groups.go), dstack 0.20's service-level and gateway routers,
// dropped in 0.21, are refused; a probe's until_ready
// stops it once passed.
var routerRules = fieldRules{
	"service:model": {Proof: []string{"daemon.TestModelRoutesRouteByModelNameThroughTheGateway"}, Subtree: true,
		Check: checkModelFormat, Note: modelNote},
	"service:router": {All: &refusal{
		Why:     "a service-level router is dstack 0.20's (dropped in 0.21): it ran SGLang's router on the gateway, and gpud's gateway has none",
		Instead: "drop router; the gateway balances the replicas itself (least outstanding requests)"}},
	// A router replica group: the gateway sends the service's traffic to
	// the router's replicas only; SGLang's router learns its workers from
	// the server (/workers API), Dynamo's workers get
	// DSTACK_ROUTER_INTERNAL_IP (router_groups.go, router_sync.go).
	"service:replicas.router": {Subtree: true, Proof: []string{"daemon.TestRouterGroupTakesTheTrafficAndLearnsItsWorkers", "daemon.TestDynamoWorkersGetTheRouterAddress"}},
	"gateway:router": {All: &refusal{
		Why:     "a gateway's router is dstack 0.20's (dropped in 0.21): the gateway ran SGLang's router for the services that asked for it, and gpud's gateway runs none",
		Instead: "drop router; the gateway balances each service's replicas itself (least outstanding requests)"}},
	"service:probes.until_ready": {Proof: []string{"daemon.TestProbeUntilReadyStopsProbingOnceReady"}},
	"service:replicas.spot_policy": {All: &refusal{Why: "a replica group's own spot policy is not applied yet",
		Instead: "set spot_policy for the whole service"}},
	"service:replicas.reservation": {All: &refusal{Why: "no host belongs to a cloud reservation: gpud has no cloud backend until backend plugins land",
		Instead: "drop reservation; pick reserved hosts with fleets or instances"}},
	"service:replicas.privileged": {All: &refusal{Why: "a replica group's own privileged is not applied yet",
		Instead: "set privileged for the whole service"}},
}

// checkModelFormat refuses format tgi: dstack's gateway translated
// OpenAI requests into TGI's own API for it, and gpud's does not.
func checkModelFormat(fc *fieldCheck, _ string) *refusal {
	m := fc.cfg.Service.Model
	if m == nil || m.Format == "" || m.Format == "openai" {
		return nil
	}
	return &refusal{Why: "format " + m.Format + " asks the gateway to translate OpenAI requests into TGI's own API, which gpud does not do",
		Instead: "use format openai: TGI serves the OpenAI API (/v1/chat/completions) since 1.4"}
}

// modelNote says where the model is served.
func modelNote(fc *fieldCheck) string {
	m := fc.cfg.Service.Model
	if m == nil {
		return ""
	}
	return "model " + m.Name + " is served at /proxy/models/" + fc.project + "/v1/ on this server (OpenAI-compatible, a project member's token), " +
		"forwarded to the service's " + proxy.ModelPrefix(m.Prefix) + "/chat/completions"
}
