package sched

import (
	"math"
	"strconv"
	"strings"
)

// allocate places pending jobs on free capacity (and pipelines them onto
// capacity being freed), one job at a time in KAI's queue and job order
// (order.go). A job places the members it misses to reach its minimum all
// or nothing, else one elastic extra; a job that placed tasks and has more
// to place goes back into its queue and waits for its turn again
// (actions/allocate: Execute pushes the job back when
// HasTasksToAllocate). A job that fails is not offered again.
func (c *cycle) allocate() {
	clear(c.failByKind)
	o := c.newJobQueue(nil)
	for j := o.next(); j >= 0; j = o.next() {
		toMin, extra := c.pendingTasks(j)
		tasks := toMin
		if len(tasks) == 0 {
			tasks = extra[:min(1, len(extra))]
		}
		if len(tasks) == 0 {
			continue
		}
		if _, ok := c.tryPlace(j, tasks, freeSoon, Allocate); ok && c.hasTasksToPlace(j) {
			o.push(j)
		}
	}
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
