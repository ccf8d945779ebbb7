package daemon

// placementRules are the fields that choose where a run may go: fleets
// and instances, the profile's placement filters, and the resources the
// scheduler matches against what hosts report (placement.go,
// placement_check.go).
var placementRules = fieldRules{
	"resources.cpu":                    {Proof: []string{"daemon.TestRunFieldsTakeEffectInsideTheJob"}},
	"resources.cpu.count":              {Proof: []string{"daemon.TestRunFieldsTakeEffectInsideTheJob"}},
	"resources.cpu.arch":               {Proof: []string{"daemon.TestPlacementResourcesMatchWhatHostsReport"}},
	"resources.gpu":                    {Proof: []string{"daemon.TestPlacementGPUCountAndSharesReachTheJob"}},
	"resources.gpu.count":              {Proof: []string{"daemon.TestPlacementGPUCountAndSharesReachTheJob"}},
	"resources.gpu.name":               {Proof: []string{"daemon.TestPlacementGPUModelsVendorAndMemoryChooseTheHost"}},
	"resources.gpu.vendor":             {Proof: []string{"daemon.TestPlacementGPUModelsVendorAndMemoryChooseTheHost"}, Check: checkVendor},
	"resources.gpu.memory":             {Proof: []string{"daemon.TestPlacementGPUModelsVendorAndMemoryChooseTheHost"}},
	"resources.gpu.total_memory":       {Proof: []string{"daemon.TestPlacementGPUModelsVendorAndMemoryChooseTheHost"}, Check: checkTotalMemory},
	"resources.gpu.compute_capability": {Proof: []string{"daemon.TestPlacementGPUModelsVendorAndMemoryChooseTheHost"}, Check: checkComputeCapability},
	"resources.gpu.fraction":           {Proof: []string{"daemon.TestPlacementGPUCountAndSharesReachTheJob"}},
	"resources.gpu.memory_share": {All: &refusal{
		Why:     "a share by memory is not turned into a share of a device yet: the job would get no device",
		Instead: "use fraction (like fraction: 0.25) for a share of one device",
	}},
	"resources.disk": {Subtree: true, Proof: []string{"daemon.TestPlacementResourcesMatchWhatHostsReport"}, Note: noteDisk},

	"fleets":    {Proof: []string{"daemon.TestPlacementFleetsAndInstancesChooseTheHost", "daemon.TestBackendFleetPlacesRunsOnItsBackendsWithinItsNodesMax"}, Check: checkRunFleets},
	"instances": {Subtree: true, Proof: []string{"daemon.TestPlacementFleetsAndInstancesChooseTheHost"}, Check: checkInstances},
	"backends":  {Proof: []string{"daemon.TestPlacementProfileFiltersAgainstOwnedHosts"}, Check: checkBackends, Note: noteBackends},
	"regions": {All: &refusal{
		Why:     "no host reports a region: gpud's hosts are the server's own, SSH and registered hosts, and regions choose among cloud offers, which need a backend plugin",
		Instead: "drop regions; pick hosts with fleets or instances",
	}},
	"availability_zones": {All: &refusal{
		Why:     "no host reports an availability zone: gpud's hosts are the server's own, SSH and registered hosts, and zones choose among cloud offers, which need a backend plugin",
		Instead: "drop availability_zones; pick hosts with fleets or instances",
	}},
	"instance_types": {All: &refusal{
		Why:     "no host reports an instance type: instance types name cloud offers, and gpud has no cloud backend until backend plugins land",
		Instead: "drop instance_types; ask for the hardware in resources (gpu: H100:8), or pick hosts with instances",
	}},
	"reservation": {All: &refusal{
		Why:     "no host belongs to a cloud reservation: gpud has no cloud backend until backend plugins land",
		Instead: "drop reservation; pick reserved hosts with fleets or instances",
	}},
	"spot_policy":     {Proof: []string{"daemon.TestPlacementProfileFiltersAgainstOwnedHosts"}, Check: checkSpot},
	"max_price":       {Proof: []string{"daemon.TestPlacementProfileFiltersAgainstOwnedHosts"}, Check: checkMaxPrice, Note: noteMaxPrice},
	"creation_policy": {Proof: []string{"daemon.TestPlacementProfileFiltersAgainstOwnedHosts"}},
	"idle_duration":   {Proof: []string{"daemon.TestPlacementProfileFiltersAgainstOwnedHosts"}, Note: noteIdleDuration},
	// dstack tags the cloud resources it creates for a run; gpud creates
	// the job's container, and labels it dev.gpud.tag.KEY=VALUE. A process
	// job has nothing to carry them.
	"tags": {Proof: []string{"daemon.TestPlacementTagsLabelTheJobsContainers"}, Refuse: map[fieldTarget]refusal{
		targetProcess: {Why: "tags label the job's container, and a process job has none", Instead: "give the run an image, or drop tags"},
		targetBackend: {Why: "tags label the containers gpud's Docker runtime creates; a job backend labels its workloads with gpud's own labels only", Instead: "run on a host with Docker, or drop tags"},
	}},
}
