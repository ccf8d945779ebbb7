package sched

// reclaim takes borrowed capacity back between queues. A job may evict
// preemptible jobs of another queue when, below the level where the two
// queues' branches meet, its own side stays within its fair share once
// the job is placed and the victim's side holds more than its fair share.
// Victims must have run for their queue's reclaim min runtime.
func (c *cycle) reclaim() {
	pending := c.unplacedJobs()
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
	for _, j := range pending {
		js := &c.jobs[j]
		toMin, _ := c.pendingTasks(j)
		if len(toMin) == 0 {
			continue
		}
		req := js.request(toMin)
		var from []int
		for _, q := range holders {
			if q == js.queue {
				continue
			}
			if mine, _ := c.lowestCommon(js.queue, q); mine >= 0 && c.withinFairShare(js.queue, mine, req) {
				from = append(from, q)
			}
		}
		c.evictFor(x, j, victimRules{
			action: Reclaim,
			queues: from,
			queueOK: func(vq int) bool {
				_, top := c.lowestCommon(js.queue, vq)
				for _, q := range c.queues[vq].path {
					if !c.overFairShare(q, req) {
						return false
					}
					if q == top {
						break
					}
				}
				return true
			},
			jobOK: func(v int) bool { return c.minRuntimeMet(x, v, Reclaim) },
			reason: func(v int) string {
				return "reclaimed for job " + js.job.Name + " of queue " + js.job.Queue +
					": queue " + c.jobs[v].job.Queue + " is over its fair share"
			},
		})
	}
}

// withinFairShare reports whether queue q and its ancestors up to top
// stay within their fair share of every resource the request needs once
// it is added. Above top the victims' queues share the same ancestors, so
// a reclaim changes nothing there.
func (c *cycle) withinFairShare(q, top int, req Resources) bool {
	for _, a := range c.queues[q].path {
		qs := &c.queues[a]
		for r := range req {
			if req[r] > 0 && qs.alloc[r]+req[r] > qs.fair[r] {
				return false
			}
		}
		if a == top {
			break
		}
	}
	return true
}

// overFairShare reports whether queue q holds more than its fair share of
// a resource the request needs.
func (c *cycle) overFairShare(q int, req Resources) bool {
	qs := &c.queues[q]
	for r := range req {
		if req[r] > 0 && qs.alloc[r] > qs.fair[r] {
			return true
		}
	}
	return false
}
