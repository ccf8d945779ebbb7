package sched

import "strconv"

// preempt makes room within a queue: a job may evict preemptible jobs of
// its own queue with strictly lower priority that have run for the
// queue's preempt min runtime. Limits and deserved quotas still hold.
func (c *cycle) preempt() {
	for _, j := range c.unplacedJobs() {
		js := &c.jobs[j]
		c.evictFor(j, victimRules{
			action: Preempt,
			eligible: func(v int) bool {
				vs := &c.jobs[v]
				return vs.queue == js.queue && vs.job.Priority < js.job.Priority && c.minRuntimeMet(v, Preempt)
			},
			reason: func(v int) string {
				return "preempted by job " + js.job.Name + " of priority " + strconv.Itoa(js.job.Priority) +
					" in queue " + js.job.Queue
			},
		})
	}
}
