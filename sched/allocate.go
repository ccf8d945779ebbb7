package sched

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// allocate places pending jobs on free capacity (and pipelines them onto
// capacity being freed): queues in fair-share order, each queue's jobs by
// priority then age. Gangs reach their minimum members all or nothing;
// then elastic jobs grow one task at a time, again in fair-share order.
func (c *cycle) allocate() {
	clear(c.failByKind)
	c.allocatePass(func(j int) bool {
		toMin, _ := c.pendingTasks(j)
		if len(toMin) == 0 {
			return false
		}
		c.tryPlace(j, toMin, freeSoon, Allocate)
		return false
	})
	c.allocatePass(func(j int) bool {
		toMin, extra := c.pendingTasks(j)
		if len(toMin) > 0 || len(extra) == 0 {
			return false
		}
		_, ok := c.tryPlace(j, extra[:1], freeSoon, Allocate)
		return ok && len(extra) > 1
	})
}

// allocatePass offers each job once, picking the queue that is furthest
// below its fair share every time. step returns true to offer the same
// job again (an elastic job that grew and may grow more).
func (c *cycle) allocatePass(step func(j int) bool) {
	cursor := make([]int, len(c.queues))
	work := make([]int, len(c.queues))
	// Only jobs with a pending task take part: running jobs cost nothing.
	waiting := make([][]int, len(c.queues))
	for q := range c.queues {
		for _, j := range c.queues[q].jobs {
			if c.countPending(j) > 0 {
				waiting[q] = append(waiting[q], j)
			}
		}
		if n := len(waiting[q]); n > 0 {
			for _, a := range c.queues[q].path {
				work[a] += n
			}
		}
	}
	for {
		q := c.pickLeaf(work)
		if q < 0 {
			return
		}
		qs := &c.queues[q]
		j := waiting[q][cursor[q]]
		if step(j) {
			continue
		}
		cursor[q]++
		for _, a := range qs.path {
			work[a]--
		}
	}
}

// pickLeaf walks down the tree choosing, at each level, the queue with
// work that has the highest priority and then the lowest share of its
// fair share in use (its dominant resource).
func (c *cycle) pickLeaf(work []int) int {
	best := -1
	for q := range c.queues {
		if c.queues[q].parent < 0 && work[q] > 0 && (best < 0 || c.before(q, best)) {
			best = q
		}
	}
	for best >= 0 && len(c.queues[best].children) > 0 {
		next := -1
		for _, ch := range c.queues[best].children {
			if work[ch] > 0 && (next < 0 || c.before(ch, next)) {
				next = ch
			}
		}
		if next < 0 {
			return best // jobs queued on a parent queue itself
		}
		best = next
	}
	return best
}

func (c *cycle) before(a, b int) bool {
	qa, qb := &c.queues[a], &c.queues[b]
	if qa.q.Priority != qb.q.Priority {
		return qa.q.Priority > qb.q.Priority
	}
	ra, rb := c.shareRatio(a), c.shareRatio(b)
	if ra != rb {
		return ra < rb
	}
	return a < b
}

// shareRatio is the queue's dominant allocated/fair-share ratio.
func (c *cycle) shareRatio(q int) float64 {
	qs := &c.queues[q]
	var worst float64
	for r := range qs.alloc {
		if qs.alloc[r] == 0 {
			continue
		}
		if qs.fair[r] == 0 {
			worst = max(worst, math.Inf(1))
			continue
		}
		worst = max(worst, float64(qs.alloc[r])/float64(qs.fair[r]))
	}
	return worst
}

// leafOrder is every queue holding jobs, in the order allocate serves them
// at this moment.
func (c *cycle) leafOrder() []int {
	var out []int
	for q := range c.queues {
		if len(c.queues[q].jobs) > 0 {
			out = append(out, q)
		}
	}
	slices.SortStableFunc(out, func(a, b int) int {
		if c.before(a, b) {
			return -1
		}
		if c.before(b, a) {
			return 1
		}
		return 0
	})
	return out
}

// tryPlace checks the job's quotas, then places the tasks as a gang.
// A failure leaves no trace but the job's reason.
func (c *cycle) tryPlace(j int, tasks []int, allow mode, a Action) (int, bool) {
	js := &c.jobs[j]
	js.tried = true
	if js.queue < 0 {
		js.setReason(false, "queue "+js.job.Queue+" does not exist")
		return 0, false
	}
	if reason := c.gate(j, js.request(tasks)); reason != "" {
		js.setReason(false, reason)
		return 0, false
	}
	key := c.shapeKey(j, tasks)
	if f, ok := c.failByKind[key]; ok {
		js.setReason(true, f.reason)
		return 0, false
	}
	n, ok := c.placeGang(j, tasks, allow, a)
	if ok {
		js.reason = ""
		return n, true
	}
	reason := c.explainPlacement(j, tasks)
	c.failByKind[key] = failure{reason: reason}
	js.setReason(true, reason)
	return n, false
}

// setReason keeps the first reason a job got; capacity says whether
// more capacity (consolidation, victims) could help it.
func (js *jobSlot) setReason(capacity bool, reason string) {
	if js.reason == "" {
		js.reason = reason
		js.capacityBound = capacity
	}
}

// gate checks every queue from the job's leaf up: limits always, and
// deserved quota for jobs that are not preemptible.
func (c *cycle) gate(j int, req Resources) string {
	js := &c.jobs[j]
	for _, q := range c.queues[js.queue].path {
		qs := &c.queues[q]
		for r := Resource(0); r < NumResources; r++ {
			if req[r] == 0 {
				continue
			}
			if l := qs.limit[r]; l >= 0 && qs.alloc[r]+req[r] > l {
				return "queue " + qs.q.Name + " is at its limit of " + amount(r, l) + ": " +
					amount(r, qs.alloc[r]) + " allocated, the job needs " + amount(r, req[r])
			}
			if d := qs.quota[r]; !js.job.Preemptible && d >= 0 && qs.npAlloc[r]+req[r] > d {
				return "job is not preemptible and queue " + qs.q.Name + " would exceed its deserved " +
					amount(r, d) + ": " + amount(r, qs.npAlloc[r]) + " non-preemptible allocated, the job needs " + amount(r, req[r])
			}
		}
	}
	return ""
}

// shapeKey identifies what a placement attempt depends on, so a failure
// is computed once per shape within an action.
func (c *cycle) shapeKey(j int, tasks []int) string {
	js := &c.jobs[j]
	var b strings.Builder
	tc := js.job.Topology
	b.WriteString(tc.Name + "|" + tc.Required + "|" + tc.Preferred + "|" + selectorKey(js.job.Nodes))
	for _, t := range tasks {
		x := &js.job.Tasks[t]
		b.WriteByte(';')
		b.WriteString(strconv.FormatInt(x.GPU, 36) + "," + x.GPUName + "," + x.MIG + "," +
			strconv.FormatInt(x.GPUMemory, 36) + "," + strconv.FormatInt(x.GPUMemoryMax, 36) + "," + strconv.FormatInt(x.CPU, 36) + "," + strconv.FormatInt(x.Memory, 36))
	}
	return b.String()
}
