package sched

import (
	"math"
	"slices"
	"time"
)

// Time-based fair share, as KAI Scheduler defines it (docs/time-based-
// fairshare/README.md; the design in docs/developer/designs/time-based-
// fairshare/time-based-fairshare.md; pkg/scheduler/cache/usagedb/prometheus
// for the usage query and plugins/proportion/resource_division for the
// division). A queue's usage is its decayed resource-hours over the
// window divided by the cluster's decayed capacity-hours over the same
// window, so a queue that held the whole cluster for the whole window
// has usage 1. Over-quota resources are then divided in rounds; in each
// round every queue still short of its request gets the portion
//
//	P = max(0, w + k·(w − u)),   share = round · P / ΣP
//
// where w is its over-quota weight over the weights of the queues still
// short, u its usage and k the strength (KAI's kValue).

// DefaultUsageWindow is the window a zero Usage.Window stands for: KAI's
// usageParams.windowSize default (one week, sliding).
const DefaultUsageWindow = 7 * 24 * time.Hour

// normalizedUsage returns, per queue and resource, the queue's usage as a
// fraction of the cluster's capacity over the window (KAI's
// PrometheusClient.GetResourceUsage divides each queue's decayed
// allocation summed over the window by the decayed capacity summed the
// same way). A parent's usage includes its descendants' (KAI's queue
// controller sums children into the parent's allocation). total is the
// cluster's capacity now, assumed over the whole window when the snapshot
// has no capacity records.
func (c *cycle) normalizedUsage(total Resources) [][NumResources]float64 {
	u := &c.snap.Usage
	out := make([][NumResources]float64, len(c.queues))
	if u.K <= 0 || len(u.Queues) == 0 {
		return out
	}
	window := u.Window
	if window <= 0 {
		window = DefaultUsageWindow
	}
	decay := func(age time.Duration) float64 {
		if u.HalfLife <= 0 {
			return 1
		}
		return math.Exp2(-float64(age) / float64(u.HalfLife))
	}
	var capacity [NumResources]float64
	if len(u.Capacity) > 0 {
		for _, rec := range u.Capacity {
			if rec.Age <= window {
				for r := range capacity {
					capacity[r] += rec.Hours[r] * decay(rec.Age)
				}
			}
		}
	} else {
		// ∫ decay over the window, in hours.
		hours := window.Hours()
		if u.HalfLife > 0 {
			h := u.HalfLife.Hours()
			hours = h / math.Ln2 * (1 - math.Exp2(-window.Hours()/h))
		}
		capacity[GPU] = float64(total[GPU]) / float64(OneGPU) * hours
		capacity[CPU] = float64(total[CPU]) / float64(OneCore) * hours
		capacity[Memory] = float64(total[Memory]) / float64(1<<30) * hours
	}
	names := make([]string, 0, len(u.Queues))
	for name := range u.Queues {
		names = append(names, name)
	}
	slices.Sort(names) // a fixed order keeps the float sums deterministic
	for _, name := range names {
		q, ok := c.queueBy[name]
		if !ok {
			continue
		}
		for _, rec := range u.Queues[name] {
			if rec.Age > window {
				continue
			}
			f := decay(rec.Age)
			for _, a := range c.queues[q].path {
				for r := range rec.Hours {
					if capacity[r] > 0 {
						out[a][r] += rec.Hours[r] * f / capacity[r]
					}
				}
			}
		}
	}
	return out
}

// divideOverQuota hands avail of resource r to the sibling queues above
// their deserved share, priority group by priority group (highest first),
// as KAI's divideOverQuotaResource does: rounds within a group
// (divideUpToFairShare), then the units the rounds left over, one per
// queue, to the queues with the largest unrounded remainder
// (divideRemainingResource). order is sibs by priority, highest first.
func (c *cycle) divideOverQuota(order []int, r Resource, avail int64, usage [][NumResources]float64) {
	unit := kaiUnit(r)
	remainder := make([]float64, len(c.queues)) // unrounded share not given
	var groups [][]int
	for g := 0; g < len(order); {
		end := g
		for end < len(order) && c.queues[order[end]].q.Priority == c.queues[order[g]].q.Priority {
			end++
		}
		groups = append(groups, order[g:end])
		g = end
	}
	for _, group := range groups {
		avail = c.divideRounds(group, r, avail, unit, usage, remainder)
	}
	for _, group := range groups {
		if avail <= 0 {
			break
		}
		byRemainder := slices.Clone(group)
		slices.SortStableFunc(byRemainder, func(a, b int) int {
			switch {
			case remainder[a] > remainder[b]:
				return -1
			case remainder[a] < remainder[b]:
				return 1
			}
			return 0 // KAI: the older queue; here the one listed first
		})
		for _, q := range byRemainder {
			if avail <= 0 || remainder[q] <= 0 {
				continue
			}
			give := min(unit, avail)
			c.queues[q].fair[r] += give
			avail -= give
		}
	}
}

// divideRounds is KAI's divideUpToFairShare for one priority group: each
// round offers the amount left at its start; a queue whose remaining
// request fits its portion gets it all, the others the portion rounded
// down to whole units. Another round runs only when some queue took less
// than its portion.
func (c *cycle) divideRounds(group []int, r Resource, avail, unit int64, usage [][NumResources]float64, remainder []float64) int64 {
	want := func(q int) int64 {
		qs := &c.queues[q]
		return min(qs.request[r], capOf(qs.limit[r])) - qs.fair[r]
	}
	portions := make([]float64, len(group))
	for avail > 0 {
		var sumW, sumP float64
		for _, q := range group {
			if want(q) > 0 {
				sumW += max(c.queues[q].weight[r], 0)
			}
		}
		if sumW == 0 {
			break
		}
		for k, q := range group {
			portions[k] = 0
			if want(q) <= 0 {
				continue
			}
			w := max(c.queues[q].weight[r], 0) / sumW
			portions[k] = max(0, w+max(c.snap.Usage.K, 0)*(w-usage[q][r]))
			sumP += portions[k]
		}
		if sumP == 0 {
			break
		}
		round := float64(avail)
		again := false
		for k, q := range group {
			need := want(q)
			if need <= 0 || c.queues[q].weight[r] <= 0 || avail == 0 {
				continue
			}
			share := round * portions[k] / sumP
			var give int64
			if float64(need) <= share {
				give = need
				remainder[q] = 0
			} else {
				give = int64(math.Floor(share/float64(unit))) * unit
				remainder[q] = share - float64(give)
			}
			give = min(give, avail)
			c.queues[q].fair[r] += give
			avail -= give
			again = again || float64(need) < share
		}
		if !again {
			break
		}
	}
	return avail
}

// kaiUnit is the unit KAI rounds over-quota shares down to: whole GPUs;
// CPU and memory are kept in milli-cores and bytes, so their shares are
// effectively not rounded.
func kaiUnit(r Resource) int64 {
	if r == GPU {
		return OneGPU
	}
	return 1
}
