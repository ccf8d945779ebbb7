package sched

import (
	"slices"
	"time"
)

// victimRules decides which running jobs an action may evict for job j.
type victimRules struct {
	action Action
	// eligible is checked before each eviction, against the state as it
	// is then (a queue that fell to its fair share stops giving).
	eligible func(v int) bool
	reason   func(v int) string
}

// unplacedJobs lists jobs still short of their minimum members whose last
// failure was capacity, in the order allocate served them.
func (c *cycle) unplacedJobs() []int {
	var out []int
	for _, j := range c.waiting() {
		if c.jobs[j].capacityBound {
			out = append(out, j)
		}
	}
	return out
}

// runningTasks returns the job's tasks that ran before this cycle and
// still do, newest member first (elastic extras go before the core).
func (c *cycle) runningTasks(v int) []int {
	var out []int
	js := &c.jobs[v]
	for t := len(js.tasks) - 1; t >= 0; t-- {
		if js.tasks[t].state == tsRunning {
			out = append(out, t)
		}
	}
	return out
}

// jobRuntime is the shortest runtime among the job's running tasks.
func (c *cycle) jobRuntime(v int) time.Duration {
	js := &c.jobs[v]
	rt := time.Duration(-1)
	for t := range js.tasks {
		if js.tasks[t].state == tsRunning && (rt < 0 || js.job.Tasks[t].Runtime < rt) {
			rt = js.job.Tasks[t].Runtime
		}
	}
	return rt
}

// victimCandidates lists preemptible running jobs in eviction order:
// lowest priority first, then the youngest, then the newest submission.
func (c *cycle) victimCandidates(filter func(v int) bool) []int {
	var out []int
	for v := range c.jobs {
		js := &c.jobs[v]
		if js.queue < 0 || !js.job.Preemptible || js.active == 0 || !filter(v) {
			continue
		}
		if len(c.runningTasks(v)) == 0 {
			continue
		}
		out = append(out, v)
	}
	slices.SortStableFunc(out, func(a, b int) int {
		ja, jb := c.jobs[a].job, c.jobs[b].job
		if ja.Priority != jb.Priority {
			return ja.Priority - jb.Priority
		}
		if ra, rb := c.jobRuntime(a), c.jobRuntime(b); ra != rb {
			return cmpInt64(int64(ra), int64(rb))
		}
		return b - a
	})
	return out
}

// evictFor evicts victims one unit at a time until job j's missing
// members fit on the capacity being freed, then places them pipelined.
// A job running above its minimum gives up its elastic extras one by one
// before its core; the core goes as a whole. If no set of victims makes
// room, nothing changes.
func (c *cycle) evictFor(j int, rules victimRules) bool {
	toMin, _ := c.pendingTasks(j)
	if len(toMin) == 0 {
		return false
	}
	js := &c.jobs[j]
	req := js.request(toMin)
	mark := len(c.log)
	for _, v := range c.victimCandidates(func(v int) bool { return v != j && c.holdsWhatIsNeeded(v, req) }) {
		vs := &c.jobs[v]
		for _, t := range c.runningTasks(v) {
			if vs.tasks[t].state != tsRunning || !rules.eligible(v) {
				break
			}
			if vs.active > vs.minM {
				c.evict(v, t, rules.action, rules.reason(v))
			} else {
				for _, u := range c.runningTasks(v) {
					c.evict(v, u, rules.action, rules.reason(v))
				}
			}
			if c.gate(j, req) != "" {
				continue
			}
			if _, ok := c.placeGang(j, toMin, freeSoon, rules.action); ok {
				js.reason = ""
				return true
			}
		}
	}
	c.rollback(mark)
	return false
}

// holdsWhatIsNeeded reports whether evicting v frees a resource the
// request needs: GPUs for GPU jobs, CPU or memory otherwise.
func (c *cycle) holdsWhatIsNeeded(v int, req Resources) bool {
	var held Resources
	for _, t := range c.runningTasks(v) {
		held = held.Add(c.jobs[v].job.Tasks[t].Request())
	}
	if req[GPU] > 0 {
		return held[GPU] > 0
	}
	return held[CPU] > 0 && req[CPU] > 0 || held[Memory] > 0 && req[Memory] > 0
}

// lowestCommon returns, for queues a and b, their ancestors just below the
// lowest common ancestor (or the top-level queues when none is shared).
func (c *cycle) lowestCommon(a, b int) (int, int) {
	pa, pb := c.queues[a].path, c.queues[b].path
	i, k := len(pa)-1, len(pb)-1
	for i >= 0 && k >= 0 && pa[i] == pb[k] {
		i--
		k--
	}
	if i < 0 || k < 0 {
		return -1, -1 // one is an ancestor of the other
	}
	return pa[i], pb[k]
}

// minRuntimeMet reports whether every running task of v has run long
// enough for action a.
func (c *cycle) minRuntimeMet(v int, a Action) bool {
	return c.jobRuntime(v) >= c.minRuntime(c.jobs[v].queue, a)
}
