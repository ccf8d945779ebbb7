package sched

// reclaim takes capacity back between queues (KAI actions/reclaim with
// the proportion plugin's reclaimable checks). For each job with tasks to
// place, in queue order (victimSeekers):
//
//   - the job may reclaim only if its leaf queue stays within its fair
//     share in every resource once the job runs, and, for a job that is
//     not preemptible, within its deserved quota of non-preemptible use
//     (reclaimable.CanReclaimResources);
//   - victims are preemptible jobs of other queues that have run their
//     reclaim_min_runtime; which queues may give is decided where the two
//     queues' branches meet (reclaimable.FilterVictim);
//   - the first victim set that lets the job run and that passes
//     reclaimable.Reclaimable is taken (see solveWithVictims).
func (c *cycle) reclaim() {
	next, touch := c.victimSeekers()
	var x *victimIndex
	failed := map[string]bool{}
	var holders []int
	for j := next(); j >= 0; j = next() {
		if x == nil {
			x = c.buildVictimIndex()
			for q := range x.byQueue {
				if len(x.byQueue[q]) > 0 {
					holders = append(holders, q)
				}
			}
		}
		js := &c.jobs[j]
		toMin := c.tasksToSolve(j)
		if len(toMin) == 0 || len(holders) == 0 {
			continue
		}
		req := js.request(toMin)
		if !c.canReclaim(j, req) {
			js.noReclaim = c.overShare(j, req) // said in its reason, if capacity stops it (reasons.go)
			continue
		}
		var from []int
		for _, q := range holders {
			if q != js.queue && c.mayReclaimFrom(js.queue, q, req) {
				from = append(from, q)
			}
		}
		if len(from) == 0 {
			continue
		}
		key := c.solveKey(j, toMin)
		if failed[key] {
			continue
		}
		if !c.solveWithVictims(x, j, toMin, victimRules{
			action:    Reclaim,
			queues:    from,
			jobOK:     func(v int) bool { return c.jobs[v].elastic() || !c.protected(x, j, v, Reclaim) },
			protected: func(v int) bool { return c.protected(x, j, v, Reclaim) },
			validate:  func(set []victimBatch, before []queueUse) bool { return c.reclaimable(j, req, set, before) },
			reason: func(v int) string {
				return "reclaimed by job " + js.job.Name + " of queue " + js.job.Queue +
					": queue " + c.jobs[v].job.Queue + " holds more than it may keep"
			},
		}) {
			failed[key] = true
			continue
		}
		touch(js.queue)
		for _, q := range from {
			touch(q)
		}
	}
}
