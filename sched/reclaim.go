package sched

// reclaim takes borrowed capacity back between queues. A job whose queue
// stays within its fair share once placed may evict preemptible jobs of
// queues that hold more than their fair share, compared at the level
// where the two queues' branches meet and below it on the victim's side.
// Victims must have run for their queue's reclaim min runtime.
func (c *cycle) reclaim() {
	for _, j := range c.unplacedJobs() {
		js := &c.jobs[j]
		toMin, _ := c.pendingTasks(j)
		req := js.request(toMin)
		if !c.withinFairShare(js.queue, req) {
			continue
		}
		c.evictFor(j, victimRules{
			action: Reclaim,
			eligible: func(v int) bool {
				vq := c.jobs[v].queue
				if vq == js.queue || !c.minRuntimeMet(v, Reclaim) {
					return false
				}
				_, top := c.lowestCommon(js.queue, vq)
				if top < 0 {
					return false
				}
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
			reason: func(v int) string {
				return "reclaimed for job " + js.job.Name + " of queue " + js.job.Queue +
					": queue " + c.jobs[v].job.Queue + " is over its fair share"
			},
		})
	}
}

// withinFairShare reports whether queue q and its ancestors stay within
// their fair share of every resource the request needs once it is added.
func (c *cycle) withinFairShare(q int, req Resources) bool {
	for _, a := range c.queues[q].path {
		qs := &c.queues[a]
		for r := range req {
			if req[r] > 0 && qs.alloc[r]+req[r] > qs.fair[r] {
				return false
			}
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
