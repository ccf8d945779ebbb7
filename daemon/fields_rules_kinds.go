package daemon

// provisioningRefusal is why the fields of fleets that gpud would have to
// provision wait: no backend can create instances yet.
var provisioningRefusal = &refusal{Why: "gpud provisions no instances yet (no cloud or Kubernetes backend)",
	Instead: "list existing hosts under ssh_config, or register hosts with `gpud fleet token` and `gpud agent --server URL --token T`"}

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
	"fleet:nodes": {Subtree: true, Proof: []string{"daemon.TestRegisteredFleetTakesNoMoreHostsThanNodesMax"},
		Check: func(fc *fieldCheck, _ string) *refusal {
			if n := fc.cfg.Fleet.Nodes; n != nil && (n.Min > 0 || n.Target > 0) {
				return &refusal{Why: "gpud provisions no instances yet, so it cannot bring a fleet up to a minimum or target of hosts (only the maximum caps how many hosts register)",
					Instead: "write nodes: 0..N and register N hosts with `gpud fleet token` and `gpud agent --server URL --token T`, or list them under ssh_config"}
			}
			return nil
		}},
	"fleet:resources":          {All: provisioningRefusal},
	"fleet:backends":           {All: provisioningRefusal},
	"fleet:regions":            {All: provisioningRefusal},
	"fleet:availability_zones": {All: provisioningRefusal},
	"fleet:instance_types":     {All: provisioningRefusal},
	"fleet:reservation":        {All: provisioningRefusal},
	"fleet:spot_policy":        {All: provisioningRefusal},
	"fleet:max_price":          {All: provisioningRefusal},
	"fleet:idle_duration":      {All: provisioningRefusal},
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
	"gateway:": {All: &refusal{Why: "gateways are not managed yet: services are served by the server's own proxy",
		Instead: "drop the gateway; services are reachable at /proxy/services/PROJECT/RUN/ on the server"}},
}
