package daemon

// provisioningRefusal is why the fields of fleets that gpud would have to
// provision, and does not pass to the cloud yet, wait.
var provisioningRefusal = &refusal{Why: "gpud does not pass this field to the machines it provisions yet (backend fleets on aws take regions, instance_types, reservation, spot_policy, max_price and idle_duration)",
	Instead: "drop it; list existing hosts under ssh_config, register hosts with `gpud fleet token` and `gpud agent --server URL --token T`, or use a backend fleet on aws"}

// autoscaleProof is the e2e test of fleet autoscaling on the AWS backend
// (against the local EC2 endpoint).
const autoscaleProof = "daemon.TestAWSFleetScalesUpForATwoNodeTaskAndBackToZeroWhenIdle"

// fleetProvisions reports whether the fleet being checked is a backend
// fleet naming an instance backend of its project (aws), whose machines
// the autoscaler makes.
func fleetProvisions(fc *fieldCheck) bool {
	return fc.srv != nil && len(fc.cfg.Fleet.Backends) > 0 && fc.srv.fleetHasInstanceBackend(fc.project, fc.cfg.Fleet.Backends)
}

// provisioningCheck refuses a provisioning field outside a fleet that
// provisions.
func provisioningCheck(fc *fieldCheck, _ string) *refusal {
	if fleetProvisions(fc) {
		return nil
	}
	return &refusal{Why: "only a backend fleet on an instance backend (aws) provisions machines; this fleet's hosts are listed (ssh_config), registered, or a job backend's (Kubernetes, Slurm), which gpud does not create",
		Instead: "name an instance backend in the fleet's backends (gpud backend add with type: aws), or drop the field"}
}

// otherKindRules are the fields of fleets, queues, volumes and gateways.
// A key "kind:" alone covers the whole kind.
var otherKindRules = fieldRules{
	"fleet:type":                       {Proof: []string{"daemon.TestSSHFleetApplyProvisionsReappliesAndDeletesHosts"}},
	"fleet:name":                       {Proof: []string{"daemon.TestSSHFleetApplyProvisionsReappliesAndDeletesHosts"}},
	"fleet:ssh_config":                 {Subtree: true, Proof: []string{"daemon.TestSSHFleetApplyProvisionsReappliesAndDeletesHosts", "daemon.TestSSHClusterRunsATwoNodeTaskWhoseNodesReachEachOther"}},
	"fleet:ssh_config.volume_prefixes": {Proof: []string{"daemon.TestSSHFleetVolumePrefixesLetRunsKeepDataOnTheHost"}},
	"fleet:ssh_config.hosts.blocks":    {All: &refusal{Why: "blocks do not split hosts yet", Instead: "drop blocks; a host's GPUs are shared job by job"}},
	"fleet:placement":                  {Proof: []string{"daemon.TestMultiNodeGangStaysWithinOneFleet"}},
	"fleet:blocks":                     {All: &refusal{Why: "blocks do not split hosts yet", Instead: "drop blocks; a host's GPUs are shared job by job"}},
	"fleet:nodes": {Subtree: true, Proof: []string{"daemon.TestRegisteredFleetTakesNoMoreHostsThanNodesMax", "daemon.TestBackendFleetPlacesRunsOnItsBackendsWithinItsNodesMax",
		autoscaleProof, "daemon.TestAWSFleetKeepsItsMinimumUpWithoutRunsAndIdle"},
		Check: func(fc *fieldCheck, _ string) *refusal {
			if n := fc.cfg.Fleet.Nodes; n != nil && (n.Min > 0 || n.Target > 0) && len(fc.cfg.Fleet.Backends) > 0 && !fleetProvisions(fc) {
				return &refusal{Why: "job backends create no machines, so a backend fleet without an instance backend (aws) has no instances to keep up to a minimum or target (its nodes max caps the jobs its runs hold at once)",
					Instead: "write nodes: 0..N (or {max: N}) to cap the fleet's runs at N nodes, or name an instance backend (type aws) in the fleet's backends"}
			}
			if n := fc.cfg.Fleet.Nodes; n != nil && (n.Min > 0 || n.Target > 0) && len(fc.cfg.Fleet.Backends) > 0 {
				return nil // kept up by the autoscaler (fleet_autoscale.go)
			}
			if n := fc.cfg.Fleet.Nodes; n != nil && (n.Min > 0 || n.Target > 0) {
				return &refusal{Why: "gpud provisions hosts only for backend fleets on an instance backend (aws), so it cannot bring this fleet up to a minimum or target of hosts (only the maximum caps how many hosts register)",
					Instead: "write nodes: 0..N and register N hosts with `gpud fleet token` and `gpud agent --server URL --token T`, or list them under ssh_config"}
			}
			return nil
		}},
	"fleet:resources": {All: &refusal{Why: "a fleet's resources do not filter its hosts nor its backends' offers (an autoscaled fleet provisions what its waiting runs ask for): each run's own resources are matched against hosts and offers",
		Instead: "drop resources from the fleet and set them on the runs"}},
	// A backend fleet (fleet_backend.go): its backends must be the
	// project's (checked at apply, api_fleets.go).
	"fleet:backends": {Proof: []string{"daemon.TestBackendFleetPlacesRunsOnItsBackendsWithinItsNodesMax", "daemon.TestKubernetesBackendFleetRunsATwoNodeTaskWithinItsNodesMax",
		"daemon.TestBackendFleetApplyChecksItsBackendsAndReportsADeletedOne"},
		Check: func(fc *fieldCheck, _ string) *refusal {
			if fc.cfg.Fleet.SSHConfig != nil {
				return &refusal{Why: "an SSH fleet's capacity is the hosts under ssh_config, a backend fleet's is its backends' offers: one fleet cannot be both",
					Instead: "make two fleets, one with ssh_config and one with backends, and name both in the run's fleets"}
			}
			return nil
		}},
	// A backend fleet on an instance backend provisions machines
	// (fleet_autoscale*.go); elsewhere these refuse.
	"fleet:regions":            {Proof: []string{autoscaleProof}, Check: provisioningCheck},
	"fleet:availability_zones": {All: provisioningRefusal},
	"fleet:instance_types":     {Proof: []string{autoscaleProof}, Check: provisioningCheck},
	"fleet:reservation":        {Proof: []string{"daemon.TestAWSFleetKeepsItsMinimumUpWithoutRunsAndIdle"}, Check: provisioningCheck},
	"fleet:spot_policy":        {Proof: []string{autoscaleProof}, Check: provisioningCheck},
	"fleet:max_price":          {Proof: []string{autoscaleProof, "daemon.TestAWSFleetMaxPriceBelowEveryOfferLeavesTheRunPendingSayingSo"}, Check: provisioningCheck},
	"fleet:idle_duration":      {Proof: []string{autoscaleProof}, Check: provisioningCheck},
	"fleet:retry":              {All: provisioningRefusal},
	"fleet:tags":               {All: provisioningRefusal},
	"fleet:env":                {All: &refusal{Why: "a fleet's env is not passed to its hosts' agents yet", Instead: "set env on the runs"}},

	"queue:type":                {Proof: []string{"daemon.TestQueuesShareAndReclaimThroughTheAPI"}},
	"queue:name":                {Proof: []string{"daemon.TestQueuesShareAndReclaimThroughTheAPI"}},
	"queue:parent":              {Proof: []string{"daemon.TestParentWithoutQuotaDeservesItsChildrensQuotas"}},
	"queue:priority":            {Proof: []string{"daemon.TestFairShareSettingsReachTheSchedulerSnapshot", "sched/scenario.TestScenarios"}},
	"queue:quota":               {Subtree: true, Proof: []string{"daemon.TestQueuesShareAndReclaimThroughTheAPI"}},
	"queue:limit":               {Subtree: true, Proof: []string{"daemon.TestFairShareSettingsReachTheSchedulerSnapshot", "sched/scenario.TestScenarios"}},
	"queue:over_quota_weight":   {Subtree: true, Proof: []string{"daemon.TestFairShareSettingsReachTheSchedulerSnapshot", "sched/scenario.TestScenarios"}},
	"queue:preempt_min_runtime": {Proof: []string{"daemon.TestFairShareSettingsReachTheSchedulerSnapshot", "sched/scenario.TestScenarios"}},
	"queue:reclaim_min_runtime": {Proof: []string{"daemon.TestFairShareSettingsReachTheSchedulerSnapshot", "sched/scenario.TestScenarios"}},

	// volume: fields are in managedVolumeRules (volumes_managed_fields.go).
	// A gateway is served by the server itself (gateway_tls.go,
	// api_gateways.go): what would need a gateway instance is refused.
	"gateway:type":    {Proof: []string{"daemon.TestGatewayApplyListDeleteAndDomainOwnership"}},
	"gateway:name":    {Proof: []string{"daemon.TestGatewayApplyListDeleteAndDomainOwnership"}},
	"gateway:default": {Proof: []string{"daemon.TestGatewayApplyListDeleteAndDomainOwnership", "daemon.TestGatewayServesServiceOverHTTPSWithACertificateFromPebble"}},
	"gateway:domain":  {Proof: []string{"daemon.TestGatewayServesServiceOverHTTPSWithACertificateFromPebble"}},
	"gateway:certificate": {Subtree: true, Proof: []string{"daemon.TestGatewayServesServiceOverHTTPSWithACertificateFromPebble", "daemon.TestGatewayWithoutCertificateServesPlainHTTP"},
		Check: func(fc *fieldCheck, _ string) *refusal {
			if c := fc.cfg.Gateway.Certificate; c != nil && c.Type == "acm" {
				return &refusal{Why: "an AWS Certificate Manager certificate lives in AWS and only AWS load balancers serve it; gpud's gateway runs in the server",
					Instead: "use certificate: {type: lets-encrypt} (the server's ACME CA, see gpud serve --acme-ca) or none"}
			}
			return nil
		}},
	"gateway:public_ip": {Proof: []string{"daemon.TestGatewayServesServiceOverHTTPSWithACertificateFromPebble"},
		Check: func(fc *fieldCheck, _ string) *refusal {
			if !fc.cfg.Gateway.PublicIP {
				return &refusal{Why: "gpud's gateway is the server's own listener, reachable wherever gpud serve --https-listen binds it",
					Instead: "drop public_ip and bind --https-listen and --http-listen to a private address"}
			}
			return nil
		}},
	"gateway:backend":       {All: gatewayInstanceRefusal},
	"gateway:region":        {All: gatewayInstanceRefusal},
	"gateway:instance_type": {All: gatewayInstanceRefusal},
	"gateway:tags":          {All: gatewayInstanceRefusal},
	"gateway:replicas": {Proof: []string{"daemon.TestGatewayApplyListDeleteAndDomainOwnership"},
		Check: func(fc *fieldCheck, _ string) *refusal {
			if fc.cfg.Gateway.Replicas > 1 {
				return &refusal{Why: "gpud's gateway is the one server; it runs no gateway replicas",
					Instead: "drop replicas (one gateway, the server, serves every service)"}
			}
			return nil
		}},
}

// gatewayInstanceRefusal is why the fields of a gateway instance wait:
// dstack creates a gateway VM on a cloud backend; gpud serves gateways
// from the server and creates no instance.
var gatewayInstanceRefusal = &refusal{Why: "gpud's gateway runs inside the server (gpud serve --domain): it creates no gateway instance on a cloud backend",
	Instead: "drop backend, region, instance_type and tags; run gpud serve --domain on a host with a public address"}
