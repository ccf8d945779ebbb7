package sched

import "strconv"

// preempt makes room within a queue (KAI actions/preempt): for each job
// with tasks to place, in queue order (victimSeekers), it looks for victims
// among the preemptible jobs of the same leaf queue with strictly lower
// priority that have run their preempt_min_runtime, and takes the first
// victim set that lets the job run (see solveWithVictims). Limits and the
// deserved quota of non-preemptible jobs still hold.
func (c *cycle) preempt() {
	next, touch := c.victimSeekers()
	var x *victimIndex
	failed := map[string]bool{}
	for j := next(); j >= 0; j = next() {
		if x == nil {
			x = c.buildVictimIndex()
		}
		js := &c.jobs[j]
		toMin := c.tasksToSolve(j)
		if len(toMin) == 0 || len(x.byQueue[js.queue]) == 0 {
			continue
		}
		if !js.job.Preemptible && c.gate(j, js.request(toMin)) != "" {
			continue // KAI IsNonPreemptibleJobOverQueueQuotaFn
		}
		key := c.solveKey(j, toMin)
		if failed[key] {
			continue
		}
		if !c.solveWithVictims(x, j, toMin, victimRules{
			action: Preempt,
			queues: []int{js.queue},
			jobOK: func(v int) bool {
				vs := &c.jobs[v]
				return vs.job.Priority < js.job.Priority && (vs.elastic() || !c.protected(x, j, v, Preempt))
			},
			protected: func(v int) bool { return c.protected(x, j, v, Preempt) },
			reason: func(v int) string {
				return "preempted by job " + js.job.Name + " of priority " + strconv.Itoa(js.job.Priority) +
					" in queue " + js.job.Queue
			},
		}) {
			failed[key] = true
			continue
		}
		touch(js.queue)
	}
}
