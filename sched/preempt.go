package sched

import "strconv"

// preempt makes room within a queue: a job may evict preemptible jobs of
// its own queue with strictly lower priority that have run for the
// queue's preempt min runtime. Limits and deserved quotas still hold.
func (c *cycle) preempt() {
	pending := c.unplacedJobs()
	if len(pending) == 0 {
		return
	}
	x := c.buildVictimIndex()
	for _, j := range pending {
		js := &c.jobs[j]
		c.evictFor(x, j, victimRules{
			action:  Preempt,
			queues:  []int{js.queue},
			queueOK: func(int) bool { return true },
			jobOK: func(v int) bool {
				return c.jobs[v].job.Priority < js.job.Priority && c.minRuntimeMet(x, v, Preempt)
			},
			reason: func(v int) string {
				return "preempted by job " + js.job.Name + " of priority " + strconv.Itoa(js.job.Priority) +
					" in queue " + js.job.Queue
			},
		})
	}
}
