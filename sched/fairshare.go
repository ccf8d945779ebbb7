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
	usage := c.decayedUsage()
	var top []int
	for i := range c.queues {
		if c.queues[i].parent < 0 {
			top = append(top, i)
		}
	}
	c.divide(top, total, usage)
}

// decayedUsage sums each queue's usage records (its own and its
// descendants'), halving per half-life and dropping those past the window.
func (c *cycle) decayedUsage() [][NumResources]float64 {
	u := c.snap.Usage
	out := make([][NumResources]float64, len(c.queues))
	if u.K == 0 || len(u.Queues) == 0 {
		return out
	}
	for name, recs := range u.Queues {
		q, ok := c.queueBy[name]
		if !ok {
			continue
		}
		for _, rec := range recs {
			if u.Window > 0 && rec.Age > u.Window {
				continue
			}
			f := 1.0
			if u.HalfLife > 0 {
				f = math.Exp2(-float64(rec.Age) / float64(u.HalfLife))
			}
			for _, a := range c.queues[q].path {
				for r := range rec.Hours {
					out[a][r] += rec.Hours[r] * f
				}
			}
		}
	}
	return out
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

// divideResource: deserved first (capped by request and limit), then the
// rest by over-quota weight within priority groups, highest first, in
// whole units; the last units go one at a time to the queue furthest
// below its weighted share.
func (c *cycle) divideResource(sibs []int, r Resource, avail int64, usage [][NumResources]float64) {
	order := slices.Clone(sibs)
	slices.SortStableFunc(order, func(a, b int) int { return c.queues[b].q.Priority - c.queues[a].q.Priority })
	want := func(q int) int64 {
		qs := &c.queues[q]
		return min(qs.request[r], capOf(qs.limit[r]))
	}
	for _, q := range order {
		qs := &c.queues[q]
		give := min(capOf(qs.quota[r]), want(q), avail)
		qs.fair[r] = max(give, 0)
		avail -= qs.fair[r]
	}
	unit := r.Unit()
	for g := 0; g < len(order) && avail > 0; {
		prio := c.queues[order[g]].q.Priority
		end := g
		for end < len(order) && c.queues[order[end]].q.Priority == prio {
			end++
		}
		group := order[g:end]
		g = end
		weights := c.adjustedWeights(group, r, usage)
		for avail > 0 {
			var open []int
			var sumW float64
			for k, q := range group {
				if want(q) > c.queues[q].fair[r] {
					open = append(open, k)
					sumW += weights[k]
				}
			}
			if len(open) == 0 {
				break
			}
			round := avail
			gave := false
			for _, k := range open {
				q := group[k]
				portion := int64(math.Floor(float64(round)*weights[k]/sumW/float64(unit))) * unit
				portion = min(portion, want(q)-c.queues[q].fair[r], avail)
				if portion > 0 {
					c.queues[q].fair[r] += portion
					avail -= portion
					gave = true
				}
			}
			if gave {
				continue
			}
			// Less than a unit each: one unit at a time, to the queue with
			// the least over-quota share per weight.
			best := -1
			var bestRatio float64
			for _, k := range open {
				q := group[k]
				over := float64(c.queues[q].fair[r]-min(capOf(c.queues[q].quota[r]), c.queues[q].fair[r])) / max(weights[k], 1e-9)
				if best < 0 || over < bestRatio {
					best, bestRatio = k, over
				}
			}
			q := group[best]
			give := min(unit, want(q)-c.queues[q].fair[r], avail)
			c.queues[q].fair[r] += give
			avail -= give
		}
	}
}

// adjustedWeights returns each queue's over-quota weight as a fraction of
// the group's, moved by k times the gap between that fraction and the
// queue's fraction of the group's decayed usage (never below zero).
func (c *cycle) adjustedWeights(group []int, r Resource, usage [][NumResources]float64) []float64 {
	w := make([]float64, len(group))
	var sumW, sumU float64
	for k, q := range group {
		w[k] = max(c.queues[q].weight[r], 0)
		sumW += w[k]
		sumU += usage[q][r]
	}
	if sumW == 0 {
		for k := range w {
			w[k] = 1
		}
		sumW = float64(len(w))
	}
	kf := c.snap.Usage.K
	adjusted := false
	for k, q := range group {
		w[k] /= sumW
		if sumU > 0 && kf != 0 {
			w[k] = max(w[k]+kf*(w[k]-usage[q][r]/sumU), 0)
			adjusted = true
		}
	}
	if adjusted {
		var s float64
		for _, x := range w {
			s += x
		}
		if s == 0 {
			for k := range w {
				w[k] = 1
			}
		}
	}
	return w
}

// minRuntime is how long a victim must have run before action a may take it.
func (c *cycle) minRuntime(q int, a Action) time.Duration {
	if a == Reclaim {
		return c.queues[q].reclaimMin
	}
	return c.queues[q].preemptMin
}
