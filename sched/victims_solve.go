package sched

import (
	"slices"
	"strings"
)

// maxScenarios bounds the victim sets each search (node by node, then
// across nodes) tries for one job, like KAI's search budget
// (actions/common/solvers/search_budget.go): a job no set can help must
// not cost a cycle its time.
const maxScenarios = 1024

// victimRules says what an action may evict for job j.
type victimRules struct {
	action Action
	// queues are the leaf queues victims may come from.
	queues []int
	// jobOK says whether v may be a victim at all (KAI's victim filters).
	jobOK func(v int) bool
	// protected: v is inside its min runtime and may give up only tasks
	// above its minimum members (KAI minruntime scenario validators).
	protected func(v int) bool
	// validate checks the victims that stop against the queues as they
	// were before the try (KAI's scenario validators); nil accepts all.
	validate func(stopped []victimBatch, before []queueUse) bool
	reason   func(v int) string
}

// solveWithVictims looks for victims that make room for job j's tasks
// toMin (tasksToSolve) the way KAI's solvers do (actions/common/solvers: JobSolver,
// PodAccumulatedScenarioBuilder, byPodSolver) and commits the first set
// that works. Victims are taken one batch at a time in victim order; a
// set is tried only when its GPUs and the free ones could hold the job.
// First, node by node (plugin sg-nodelocalgreedy): after each new batch,
// for each node it runs on, the jobs taken so far that run there; then,
// when no single node works, everything taken so far (sg-multinodegang),
// which is how a gang that needs several nodes gets room. Trying a set
// evicts it, places the job pipelined, and gives back every victim that
// still fits where it ran (KAI re-allocates the victims after the
// preemptor and un-evicts those landing on their own node), so only the
// victims the placement needs stop. If no set works, nothing changes.
func (c *cycle) solveWithVictims(x *victimIndex, j int, toMin []int, rules victimRules) bool {
	if len(toMin) == 0 {
		return false
	}
	js := &c.jobs[j]
	req := js.request(toMin)
	for _, perNode := range []bool{true, false} {
		tried := 0
		vq := c.newVictimQueue(x, j, rules.queues, rules.jobOK)
		var acc []victimBatch
		var accGPU int64
		for tried < maxScenarios {
			b, ok := vq.next()
			if !ok {
				break
			}
			if b.core && rules.protected != nil && rules.protected(b.job) {
				continue // would take a protected job below its minimum
			}
			acc = append(acc, b)
			accGPU += b.gpu
			if req[GPU] > 0 && x.freeGPU+accGPU < req[GPU] {
				continue
			}
			if !perNode {
				tried++
				if c.trySolution(x, j, toMin, req, acc, rules) {
					return true
				}
				continue
			}
			for _, n := range c.batchNodes(b) {
				if js.eligible != nil && !js.eligible.has(n) {
					continue
				}
				tried++
				if c.trySolution(x, j, toMin, req, onNode(c, acc, n), rules) {
					return true
				}
			}
		}
	}
	return false
}

// batchNodes lists the nodes a batch runs on, by name (KAI's order).
func (c *cycle) batchNodes(b victimBatch) []int {
	var out []int
	for _, t := range b.tasks {
		if n := int(c.jobs[b.job].tasks[t].node); n >= 0 && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b int) int { return strings.Compare(c.nodes[a].node.Name, c.nodes[b].node.Name) })
	return out
}

// onNode keeps the batches of set whose job has a task on node n, every
// task of them (KAI ByNodeScenario.VictimsTasksFromNodes): a gang victim
// goes whole even when only part of it runs there.
func onNode(c *cycle, set []victimBatch, n int) []victimBatch {
	there := map[int]bool{}
	for _, b := range set {
		for _, t := range b.tasks {
			if int(c.jobs[b.job].tasks[t].node) == n {
				there[b.job] = true
			}
		}
	}
	var out []victimBatch
	for _, b := range set {
		if there[b.job] {
			out = append(out, b)
		}
	}
	return out
}

// trySolution evicts set, places j's missing members and keeps the result
// when both work and the victims that really stop pass the validator.
// Victims the placement does not need keep running where they are; the
// others are placed again elsewhere when they fit, pipelined (KAI
// re-allocates every victim after the preemptor: Statement.Pipeline
// un-evicts one landing on its own node and moves the others), and only
// those that land nowhere stop. The validator sees the queues as they
// were before the try and only the victims that stop
// (allow-consolidating-reclaim, on by default in KAI).
func (c *cycle) trySolution(x *victimIndex, j int, toMin []int, req Resources, set []victimBatch, rules victimRules) bool {
	if len(set) == 0 {
		return false
	}
	var before []queueUse
	if rules.validate != nil {
		before = c.queueUses()
	}
	mark := len(c.log)
	if !c.evictAndPlace(j, toMin, req, set, rules) {
		c.rollback(mark)
		return false
	}
	if back := c.fitBack(set); slices.Contains(back, true) {
		var need []victimBatch
		for i, b := range set {
			if !back[i] {
				need = append(need, b)
			}
		}
		c.rollback(mark)
		if c.evictAndPlace(j, toMin, req, need, rules) {
			set = need
		} else {
			c.rollback(mark)
			c.evictAndPlace(j, toMin, req, set, rules) // worked a moment ago
		}
	}
	stopped := c.moveVictims(set, rules.action, "moved to make room for job "+c.jobs[j].job.Name)
	if rules.validate != nil && !rules.validate(stopped, before) {
		c.rollback(mark)
		return false
	}
	for i := mark; i < len(c.log); i++ {
		o := c.log[i]
		slot := &c.jobs[o.job].tasks[o.task]
		g := c.jobs[o.job].job.Tasks[o.task].GPU
		switch slot.state {
		case tsEvicted:
			x.freeGPU += g
		case tsBound, tsPipelined:
			if slot.oldNode >= 0 {
				x.freeGPU += g // a moved victim: freed here, taken there
			}
			x.freeGPU -= g
		}
	}
	c.jobs[j].reason = ""
	return true
}

// moveVictims places victims again on other capacity, pipelined, in KAI's
// allocate order (higher priority first, then below, at and above the
// minimum, then the older submission), each job as allocate would place
// it (podgroup_info.GetTasksToAllocate): the members it misses to reach
// its minimum, all or none, else one member. It returns what stops: the
// batches' tasks that landed nowhere. A moved task's eviction says why.
func (c *cycle) moveVictims(set []victimBatch, a Action, why string) []victimBatch {
	var jobs []int
	tasks := map[int][]int{}
	for _, b := range set {
		if _, ok := tasks[b.job]; !ok {
			jobs = append(jobs, b.job)
		}
		tasks[b.job] = append(tasks[b.job], b.tasks...)
	}
	slices.SortStableFunc(jobs, func(x, y int) int {
		if px, py := c.jobs[x].job.Priority, c.jobs[y].job.Priority; px != py {
			return py - px
		}
		if ex, ey := c.elasticState(x, 0), c.elasticState(y, 0); ex != ey {
			return ex - ey
		}
		return x - y
	})
	moved := map[[2]int]bool{}
	for _, v := range jobs {
		ts := slices.Clone(tasks[v])
		slices.Sort(ts)
		k := min(max(c.jobs[v].minM-c.jobs[v].active, 1), len(ts))
		ts = ts[:k]
		if c.gate(v, c.jobs[v].request(ts)) != "" {
			continue // KAI AllocateJob: IsJobOverQueueCapacityFn
		}
		m := len(c.log)
		if _, ok := c.placeGang(v, ts, freeSoon, a); ok {
			c.pipelineAll(v, m)
			for _, t := range ts {
				moved[[2]int{v, t}] = true
				c.jobs[v].tasks[t].reason = why
			}
		}
	}
	var out []victimBatch
	for _, b := range set {
		keep := victimBatch{job: b.job}
		for _, t := range b.tasks {
			if !moved[[2]int{b.job, t}] {
				keep.tasks = append(keep.tasks, t)
				keep.gpu += c.jobs[b.job].job.Tasks[t].GPU
			}
		}
		if len(keep.tasks) > 0 {
			out = append(out, keep)
		}
	}
	return out
}

func (c *cycle) evictAndPlace(j int, toMin []int, req Resources, set []victimBatch, rules victimRules) bool {
	for _, b := range set {
		for _, t := range b.tasks {
			c.evict(b.job, t, rules.action, rules.reason(b.job))
		}
	}
	if c.gate(j, req) != "" {
		return false
	}
	_, ok := c.placeGang(j, toMin, freeSoon, rules.action)
	return ok
}

// fitBack reports, per batch of the evicted set, whether its tasks fit
// again on the devices they held once j is placed, taking the victims in
// KAI's job order (higher priority first, then the older submission).
func (c *cycle) fitBack(set []victimBatch) []bool {
	order := make([]int, len(set))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ja, jb := set[a].job, set[b].job
		if pa, pb := c.jobs[ja].job.Priority, c.jobs[jb].job.Priority; pa != pb {
			return pb - pa
		}
		return ja - jb
	})
	type devKey struct{ n, p int }
	extraDev := map[devKey]int64{}
	extraCPU, extraMem := map[int]int64{}, map[int]int64{}
	back := make([]bool, len(set))
	for _, i := range order {
		b := set[i]
		fits := true
		addDev := map[devKey]int64{}
		addCPU, addMem := map[int]int64{}, map[int]int64{}
		for _, t := range b.tasks {
			slot := &c.jobs[b.job].tasks[t]
			task := &c.jobs[b.job].job.Tasks[t]
			n := int(slot.oldNode)
			ns := &c.nodes[n]
			addCPU[n] += task.CPU
			addMem[n] += task.Memory
			if !ns.schedulable || ns.usedCPU+extraCPU[n]+addCPU[n] > ns.node.CPU || ns.usedMem+extraMem[n]+addMem[n] > ns.node.Memory {
				fits = false
				break
			}
			per := perDevice(task, len(slot.oldDevs))
			for _, p := range slot.oldDevs {
				k := devKey{n, p}
				addDev[k] += per
				if ns.devs[p].used+extraDev[k]+addDev[k] > OneGPU {
					fits = false
				}
			}
			if !fits {
				break
			}
		}
		if !fits {
			continue
		}
		back[i] = true
		for k, v := range addDev {
			extraDev[k] += v
		}
		for n, v := range addCPU {
			extraCPU[n] += v
		}
		for n, v := range addMem {
			extraMem[n] += v
		}
	}
	return back
}
