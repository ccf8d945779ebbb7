package sched

import (
	"slices"
	"strconv"
	"time"
)

// victimIndex lists, per leaf queue, the preemptible jobs running at the
// start of an action in KAI's victim order (its job order reversed,
// framework.Session.JobOrderFn with the priority and elastic plugins):
// lowest priority first, then jobs above their minimum members before
// jobs at it, then the newest submission first. It is built once per
// action, so finding victims never sorts every running job again.
type victimIndex struct {
	byQueue [][]int32
	start   []int // per queue: entries before it no longer run
	runtime []time.Duration
	total   Resources // the cluster's capacity, for dominant shares
	// freeGPU is the GPU capacity free now or being freed, kept up to
	// date as solutions commit: a victim set whose GPUs and this cannot
	// hold a job's request is not tried (KAI's idle-GPUs scenario filter).
	freeGPU int64
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
	x.total = c.capacity()
	for n := range c.nodes {
		if !c.nodes[n].schedulable {
			continue
		}
		for _, d := range c.nodes[n].devs {
			x.freeGPU += OneGPU - d.used
		}
	}
	for q := range x.byQueue {
		slices.SortStableFunc(x.byQueue[q], func(a, b int32) int { return c.victimCompare(int(a), int(b), 0, 0) })
	}
	return x
}

// victimCompare orders two victims (negative: a goes first), with takenA
// and takenB of their running tasks already chosen as victims.
func (c *cycle) victimCompare(a, b, takenA, takenB int) int {
	ja, jb := c.jobs[a].job, c.jobs[b].job
	if ja.Priority != jb.Priority {
		return ja.Priority - jb.Priority
	}
	if ea, eb := c.elasticState(a, takenA), c.elasticState(b, takenB); ea != eb {
		return eb - ea
	}
	return b - a
}

// elasticState is 1 for a job running above its minimum members, 0 at it
// and -1 below (KAI plugins/elastic JobOrderFn).
func (c *cycle) elasticState(v, taken int) int {
	js := &c.jobs[v]
	switch n := js.active - taken; {
	case n > js.minM:
		return 1
	case n == js.minM:
		return 0
	}
	return -1
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

// victimSeekers hands out the jobs reclaim and preempt try to make room
// for, one at a time in KAI's queue and job order, re-evaluated after
// every job (actions/reclaim and actions/preempt Execute pop a
// JobsOrderByQueues built from the session's pending jobs): every job with
// a task to place. A job an earlier action found blocked by something other
// than capacity (a limit, a quota, missing hardware) is left out: evicting
// others cannot help it. Call touch with the queues a solution changed.
func (c *cycle) victimSeekers() (next func() int, touch func(q int)) {
	o := c.newJobQueue(func(j int) bool {
		js := &c.jobs[j]
		return !js.tried || js.capacityBound
	})
	return o.next, o.touch
}

// solveKey identifies what a victim search for job j's tasks depends on
// besides the victims: its queue, priority, preemptibility and task
// shapes. A job whose key already failed in the action is not searched
// again (KAI's MinimalJobRepresentatives per queue).
func (c *cycle) solveKey(j int, tasks []int) string {
	js := &c.jobs[j]
	return strconv.Itoa(js.queue) + "|" + strconv.Itoa(js.job.Priority) + "|" + strconv.FormatBool(js.job.Preemptible) + "|" + c.shapeKey(j, tasks)
}

// tasksToSolve are the tasks KAI's solvers place for job j: the members it
// misses to reach its minimum, else one elastic extra
// (podgroup_info.GetTasksToAllocate).
func (c *cycle) tasksToSolve(j int) []int {
	toMin, extra := c.pendingTasks(j)
	if len(toMin) > 0 {
		return toMin
	}
	if len(extra) > 0 {
		return extra[:1]
	}
	return nil
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

// protected reports whether victim v is still inside its min runtime for
// an eviction by job j in action a (KAI plugins/minruntime). Preempt uses
// the victim queue's preempt_min_runtime, inherited down the tree; reclaim
// resolves reclaim_min_runtime the "lca" way, KAI's default: from the
// victim's side of the queue where the two branches meet, upward.
func (c *cycle) protected(x *victimIndex, j, v int, a Action) bool {
	vq := c.jobs[v].queue
	min := c.queues[vq].preemptMin
	if a == Reclaim {
		q := vq
		if _, side := c.lowestCommon(c.jobs[j].queue, vq); side >= 0 {
			q = side
		}
		min = c.queues[q].reclaimMin
	}
	return x.runtime[v] < min
}

// elastic reports whether a job may run with fewer tasks than it has.
func (js *jobSlot) elastic() bool { return js.minM < len(js.tasks) }
