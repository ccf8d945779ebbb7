package sched

import (
	"slices"
	"time"
)

// victimRules decides which running jobs an action may evict for job j.
type victimRules struct {
	action Action
	// queues are the leaf queues victims may come from.
	queues []int
	// queueOK is checked before each eviction, against the state as it is
	// then (a queue that fell to its fair share stops giving).
	queueOK func(q int) bool
	jobOK   func(v int) bool
	reason  func(v int) string
}

// victimIndex lists, per queue, the preemptible jobs running at the start
// of an action in eviction order: lowest priority first, then the
// youngest, then the newest submission. It is built once per action, so
// finding victims never sorts or scans every running job again.
type victimIndex struct {
	byQueue [][]int32
	start   []int // per queue: entries before it no longer run
	runtime []time.Duration
}

func (c *cycle) buildVictimIndex() *victimIndex {
	x := &victimIndex{byQueue: make([][]int32, len(c.queues)), start: make([]int, len(c.queues)), runtime: make([]time.Duration, len(c.jobs))}
	for v := range c.jobs {
		js := &c.jobs[v]
		if js.queue < 0 || !js.job.Preemptible || js.active == 0 {
			continue
		}
		x.runtime[v] = c.jobRuntime(v)
		if x.runtime[v] < 0 {
			continue // holds only tasks placed this cycle
		}
		x.byQueue[js.queue] = append(x.byQueue[js.queue], int32(v))
	}
	for q := range x.byQueue {
		slices.SortStableFunc(x.byQueue[q], func(a, b int32) int { return x.compare(c, int(a), int(b)) })
	}
	return x
}

// compare orders two victims: negative when a should go first.
func (x *victimIndex) compare(c *cycle, a, b int) int {
	ja, jb := c.jobs[a].job, c.jobs[b].job
	if ja.Priority != jb.Priority {
		return ja.Priority - jb.Priority
	}
	if x.runtime[a] != x.runtime[b] {
		return cmpInt64(int64(x.runtime[a]), int64(x.runtime[b]))
	}
	return b - a
}

func (c *cycle) stillRunning(v int) bool {
	js := &c.jobs[v]
	for t := range js.tasks {
		if js.tasks[t].state == tsRunning {
			return true
		}
	}
	return false
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

// jobRuntime is the shortest runtime among the job's running tasks, or -1
// when none ran before this cycle.
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

// evictFor evicts victims one unit at a time until job j's missing
// members fit on the capacity being freed, then places them pipelined.
// Each step takes the first victim, in eviction order, among the allowed
// queues. A job running above its minimum gives up its elastic extras one
// by one before its core; the core goes as a whole. If no set of victims
// makes room, nothing changes.
func (c *cycle) evictFor(x *victimIndex, j int, rules victimRules) bool {
	toMin, _ := c.pendingTasks(j)
	if len(toMin) == 0 {
		return false
	}
	js := &c.jobs[j]
	req := js.request(toMin)
	mark := len(c.log)
	cursor := make([]int, len(rules.queues))
	for i, q := range rules.queues {
		list := x.byQueue[q]
		for x.start[q] < len(list) && !c.stillRunning(int(list[x.start[q]])) {
			x.start[q]++
		}
		cursor[i] = x.start[q]
	}
	for {
		best := -1
		for i, q := range rules.queues {
			if cursor[i] < 0 {
				continue
			}
			if !rules.queueOK(q) {
				cursor[i] = -1
				continue
			}
			list := x.byQueue[q]
			for cursor[i] < len(list) {
				v := int(list[cursor[i]])
				if v != j && c.stillRunning(v) && rules.jobOK(v) && c.holdsWhatIsNeeded(v, req) && c.runsOn(v, js.eligible) {
					break
				}
				cursor[i]++
			}
			if cursor[i] == len(list) {
				cursor[i] = -1
				continue
			}
			if v := int(list[cursor[i]]); best < 0 || x.compare(c, v, best) < 0 {
				best = v
			}
		}
		if best < 0 {
			break
		}
		vs := &c.jobs[best]
		if vs.active > vs.minM {
			c.evict(best, c.runningTasks(best)[0], rules.action, rules.reason(best))
		} else {
			for _, u := range c.runningTasks(best) {
				c.evict(best, u, rules.action, rules.reason(best))
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
	c.rollback(mark)
	return false
}

// runsOn reports whether a running task of v is on a node in set (nil:
// any node): evicting a job from nodes j may not use frees nothing for j.
func (c *cycle) runsOn(v int, set bitset) bool {
	if set == nil {
		return true
	}
	for _, t := range c.runningTasks(v) {
		if n := c.jobs[v].tasks[t].node; n >= 0 && set.has(int(n)) {
			return true
		}
	}
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
func (c *cycle) minRuntimeMet(x *victimIndex, v int, a Action) bool {
	return x.runtime[v] >= c.minRuntime(c.jobs[v].queue, a)
}
