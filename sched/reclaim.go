package sched

// reclaim takes capacity back between queues (KAI actions/reclaim with
// the proportion plugin's reclaimable checks). For each job still short of
// its minimum members, in queue order:
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
	pending := c.victimSeekers()
	if len(pending) == 0 {
		return
	}
	x := c.buildVictimIndex()
	var holders []int
	for q := range x.byQueue {
		if len(x.byQueue[q]) > 0 {
			holders = append(holders, q)
		}
	}
	if len(holders) == 0 {
		return
	}
	for _, j := range pending {
		js := &c.jobs[j]
		toMin, _ := c.pendingTasks(j)
		if len(toMin) == 0 {
			continue
		}
		req := js.request(toMin)
		if !c.canReclaim(j, req) {
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
		c.solveWithVictims(x, j, victimRules{
			action:    Reclaim,
			queues:    from,
			jobOK:     func(v int) bool { return c.jobs[v].elastic() || !c.protected(x, j, v, Reclaim) },
			protected: func(v int) bool { return c.protected(x, j, v, Reclaim) },
			validate:  func(set []victimBatch, before []queueUse) bool { return c.reclaimable(j, req, set, before) },
			reason: func(v int) string {
				return "reclaimed for job " + js.job.Name + " of queue " + js.job.Queue +
					": queue " + c.jobs[v].job.Queue + " holds more than it may keep"
			},
		})
	}
}
