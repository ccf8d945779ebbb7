package daemon

// lifecycleRules are the fields that say how long a run lives and what
// happens when it fails: retries, durations, the stop grace period.
var lifecycleRules = fieldRules{
	"retry":         {Subtree: true, Proof: []string{"daemon.TestRetryOnNoCapacity", "daemon.TestRetryOnInterruption"}},
	"max_duration":  {Proof: []string{"daemon.TestReapplyWithANewPriorityUpdatesTheRunInPlace"}},
	"stop_duration": {Proof: []string{"daemon.TestReapplyWithANewPriorityUpdatesTheRunInPlace"}},
}
