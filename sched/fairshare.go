package sched

import (
	"math"
	"slices"
	"time"
)

// FromChildren as a parent queue's quota means it deserves the sum of its
// children's quotas.
const FromChildren int64 = -2

func (c *cycle) buildQueues() {
	c.queues = make([]queueState, len(c.snap.Queues))
	for i := range c.snap.Queues {
		q := &c.snap.Queues[i]
		c.queueBy[q.Name] = i
		qs := &c.queues[i]
		qs.q, qs.parent = q, -1
		qs.quota, qs.limit, qs.weight = q.Quota, q.Limit, q.OverQuotaWeight
		if p, ok := c.queueBy[q.Parent]; ok && q.Parent != "" && p != i {
			qs.parent = p
			c.queues[p].children = append(c.queues[p].children, i)
			qs.preemptMin, qs.reclaimMin = c.queues[p].preemptMin, c.queues[p].reclaimMin
		}
		if q.PreemptMinRuntime != nil {
			qs.preemptMin = *q.PreemptMinRuntime
		}
		if q.ReclaimMinRuntime != nil {
			qs.reclaimMin = *q.ReclaimMinRuntime
		}
		qs.path = append([]int{i}, c.pathOf(qs.parent)...)
	}
	// A parent that deserves "from children" deserves their sum; children
	// come after parents, so walk backwards.
	for i := len(c.queues) - 1; i >= 0; i-- {
		qs := &c.queues[i]
		for r := range qs.quota {
			if qs.quota[r] != FromChildren {
				continue
			}
			var sum int64
			for _, ch := range qs.children {
				v := c.queues[ch].quota[r]
				if v == Unlimited || sum == Unlimited {
					sum = Unlimited
					continue
				}
				sum += max(v, 0)
			}
			qs.quota[r] = sum
		}
	}
}

func (c *cycle) pathOf(q int) []int {
	if q < 0 {
		return nil
	}
	return c.queues[q].path
}

// computeFairShare divides the cluster per resource down the queue tree.
func (c *cycle) computeFairShare() {
	for j := range c.jobs {
		js := &c.jobs[j]
		if js.queue < 0 {
			continue
		}
		var r Resources
		for t := range js.tasks {
			if s := js.tasks[t].state; s == tsPending || s == tsRunning {
				r = r.Add(js.job.Tasks[t].Request())
			}
		}
		for _, q := range c.queues[js.queue].path {
			c.queues[q].request = c.queues[q].request.Add(r)
		}
	}
	var total Resources
	for n := range c.nodes {
		ns := &c.nodes[n]
		if !ns.schedulable {
			continue
		}
		total[GPU] += int64(len(ns.devs)) * OneGPU
		total[CPU] += ns.node.CPU
		total[Memory] += ns.node.Memory
	}
	usage := c.normalizedUsage(total)
	var top []int
	for i := range c.queues {
		if c.queues[i].parent < 0 {
			top = append(top, i)
		}
	}
	c.divide(top, total, usage)
}

// divide hands avail to sibling queues and recurses into each.
func (c *cycle) divide(sibs []int, avail Resources, usage [][NumResources]float64) {
	for r := Resource(0); r < NumResources; r++ {
		c.divideResource(sibs, r, avail[r], usage)
	}
	for _, q := range sibs {
		if ch := c.queues[q].children; len(ch) > 0 {
			c.divide(ch, c.queues[q].fair, usage)
		}
	}
}

func capOf(v int64) int64 {
	if v < 0 {
		return math.MaxInt64
	}
	return v
}

// divideResource: deserved first, min(quota, request, limit) for each
// queue even when the quotas add up to more than the parent holds (KAI's
// setDeservedResource), then what remains over quota (divideOverQuota).
func (c *cycle) divideResource(sibs []int, r Resource, avail int64, usage [][NumResources]float64) {
	order := slices.Clone(sibs)
	slices.SortStableFunc(order, func(a, b int) int { return c.queues[b].q.Priority - c.queues[a].q.Priority })
	total := max(avail, 0)
	for _, q := range order {
		qs := &c.queues[q]
		quota := capOf(qs.quota[r])
		if qs.quota[r] == Unlimited {
			quota = total
		}
		qs.fair[r] = max(min(quota, qs.request[r], capOf(qs.limit[r])), 0)
		avail -= qs.fair[r]
	}
	if avail > 0 {
		c.divideOverQuota(order, r, avail, usage)
	}
}

// minRuntime is how long a victim must have run before action a may take it.
func (c *cycle) minRuntime(q int, a Action) time.Duration {
	if a == Reclaim {
		return c.queues[q].reclaimMin
	}
	return c.queues[q].preemptMin
}
