package sched

import (
	"math"
	"slices"
)

// canReclaim: job j's leaf queue stays within its fair share in every
// resource with the job's request added; a job that is not preemptible
// also keeps the queue's non-preemptible use within its deserved quota
// (KAI plugins/proportion/reclaimable.Reclaimable.CanReclaimResources).
func (c *cycle) canReclaim(j int, req Resources) bool {
	js := &c.jobs[j]
	qs := &c.queues[js.queue]
	for r := range req {
		if qs.alloc[r]+req[r] > qs.fair[r] {
			return false
		}
		if !js.job.Preemptible && !leq(qs.npAlloc[r]+req[r], qs.quota[r]) {
			return false
		}
	}
	return true
}

// mayReclaimFrom says whether queue vq may give victims to a job of queue
// rq asking for req, judged one level below where the branches meet
// (KAI reclaimable.FilterVictim): when the reclaimer's side would exceed
// its deserved quota, the victim's side must hold more than it may keep
// (its fair share or deserved quota, whichever is larger); otherwise the
// victim's side must be above its deserved quota in a resource the job
// asks for, and below it in none.
func (c *cycle) mayReclaimFrom(rq, vq int, req Resources) bool {
	mine, theirs := c.lowestCommon(rq, vq)
	if mine < 0 {
		return false
	}
	if !c.withinDeserved(mine, req) {
		return exceeds(c.queues[theirs].alloc, c.allocatable(theirs))
	}
	qs := &c.queues[theirs]
	under := false
	for r := range req {
		if req[r] <= 0 || qs.quota[r] == Unlimited {
			continue
		}
		if qs.alloc[r] > qs.quota[r] {
			return true
		}
		if qs.alloc[r] < qs.quota[r] {
			under = true
		}
	}
	return !under
}

// exceeds: a is above b in at least one resource (Unlimited: never).
func exceeds(a, b Resources) bool { return !lessEqual(a, b) }

// queueUse is what a queue held before a try: all of it, and its
// non-preemptible part.
type queueUse struct{ alloc, np Resources }

func (c *cycle) queueUses() []queueUse {
	out := make([]queueUse, len(c.queues))
	for q := range c.queues {
		out[q] = queueUse{c.queues[q].alloc, c.queues[q].npAlloc}
	}
	return out
}

// reclaimable validates the victims that stop for job j against the
// queues as they were before the try, before (KAI
// reclaimable.Reclaimable on the session's queues cloned when the job's
// solution started). Each victim queue's victims are taken in turn
// from what its side of the tree still holds: before each one, that side
// must hold more than it may keep (MaintainFairShareStrategy), or the
// reclaimer's side must be within its deserved quota with the job and the
// victim's side above its own (GuaranteeDeservedQuotaStrategy). Then, at
// every level of the reclaimer's branch, a reclaimer above its fair share
// must stay less saturated than every sibling it took from, in each
// resource involved; and a job that is not preemptible keeps each level's
// non-preemptible use within its deserved quota.
func (c *cycle) reclaimable(j int, req Resources, set []victimBatch, before []queueUse) bool {
	js := &c.jobs[j]
	rq := js.queue
	remaining := map[int]Resources{}
	involved := map[int][NumResources]bool{}
	var order []int
	byQueue := map[int][]Resources{}
	for _, b := range victimGroups(c, set) {
		q := c.jobs[b.job].queue
		if _, ok := byQueue[q]; !ok {
			order = append(order, q)
		}
		byQueue[q] = append(byQueue[q], b.held)
	}
	for _, vq := range order {
		mine, theirs := c.lowestCommon(rq, vq)
		if mine < 0 {
			return false
		}
		if _, ok := remaining[theirs]; !ok {
			remaining[theirs] = before[theirs].alloc
		}
		var inv [NumResources]bool
		for _, v := range byQueue[vq] {
			for r := range v {
				inv[r] = inv[r] || v[r] > 0
			}
		}
		involved[vq] = inv
		for _, v := range byQueue[vq] {
			rem := remaining[theirs]
			keep := exceeds(rem, c.allocatable(theirs))
			guarantee := lessEqual(before[mine].alloc.Add(req), c.queues[mine].quota) && exceeds(rem, c.queues[theirs].quota)
			if !keep && !guarantee {
				return false
			}
			for _, a := range c.queues[vq].path {
				if _, ok := remaining[a]; !ok {
					remaining[a] = before[a].alloc
				}
				remaining[a] = remaining[a].Sub(v)
				ia := involved[a]
				for r := range ia {
					ia[r] = ia[r] || inv[r]
				}
				involved[a] = ia
			}
		}
	}
	touched := make([]int, 0, len(remaining))
	for q := range remaining {
		touched = append(touched, q)
	}
	slices.Sort(touched)
	for _, a := range c.queues[rq].path {
		rem, ok := remaining[a]
		if !ok {
			rem = before[a].alloc
		}
		rem = rem.Add(req)
		for _, s := range touched {
			if s == a || c.queues[s].parent != c.queues[a].parent {
				continue
			}
			for r := range req {
				if !involved[s][r] && req[r] <= 0 {
					continue
				}
				mineRatio := saturation(rem[r], c.queues[a].fair[r])
				theirs := saturation(remaining[s][r], c.queues[s].fair[r])
				if mineRatio > 1 && c.queues[s].fair[r] > 0 && mineRatio >= theirs {
					return false
				}
			}
		}
		if !js.job.Preemptible {
			for r := range req {
				if !leq(before[a].np[r]+req[r], c.queues[a].quota[r]) {
					return false
				}
			}
		}
	}
	return true
}

// saturation is allocated/fair share; a zero share is infinitely
// saturated by anything held.
func saturation(alloc, fair int64) float64 {
	if fair == 0 {
		if alloc > 0 {
			return math.Inf(1)
		}
		return 0
	}
	return float64(alloc) / float64(fair)
}

// victimGroup is what one victim job gives up, as KAI's proportion plugin
// counts it (getVictimResources): its tasks up to its minimum members as
// one amount, after each task beyond it as its own.
type victimGroup struct {
	job  int
	held Resources
}

func victimGroups(c *cycle, set []victimBatch) []victimGroup {
	var jobs []int
	tasks := map[int][]int{}
	for _, b := range set {
		if _, ok := tasks[b.job]; !ok {
			jobs = append(jobs, b.job)
		}
		tasks[b.job] = append(tasks[b.job], b.tasks...)
	}
	var out []victimGroup
	for _, v := range jobs {
		js := &c.jobs[v]
		ts := tasks[v]
		core := ts
		if js.minM < len(ts) {
			core = ts[:js.minM]
		}
		for _, t := range ts[len(core):] {
			out = append(out, victimGroup{job: v, held: js.job.Tasks[t].Request()})
		}
		g := victimGroup{job: v}
		for _, t := range core {
			g.held = g.held.Add(js.job.Tasks[t].Request())
		}
		out = append(out, g)
	}
	return out
}
