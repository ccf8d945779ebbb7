package sched

import (
	"slices"
	"strconv"
)

// consolidateMaxVictims is how many victim jobs consolidation considers
// for one pending job: KAI's --max-consolidation-preemptees default.
const consolidateMaxVictims = 16

// consolidate defragments, as KAI Scheduler's consolidation action does
// (actions/consolidation/consolidation.go, with the job solver in
// actions/common/solvers):
//
//   - Only preemptible pending jobs ask for it (JobsOrderInitOptions
//     FilterNonPreemptible), in allocate's order, each for the tasks
//     allocate would place next (the members up to its minimum, or one
//     elastic task); a job that would exceed its queue's limit does not.
//   - A job is tried only when the GPUs free or being freed in the cluster
//     cover its request (utils.IsEnoughGPUsAllocatableForJob).
//   - Victims are running preemptible jobs of any queue, any size: a gang
//     at its minimum as a whole, an elastic job one extra task at a time
//     (podgroup_info.GetTasksToEvict), in KAI's victim order (the queue
//     order reversed, then lowest priority, elastic state, newest
//     submission: victims_order.go); at most 16 jobs.
//   - Victims accumulate one batch at a time; each set passes a quick
//     per-node GPU check (solvers/accumulated_scenario_filters/idle_gpus)
//     and is then tried on a growing prefix of its nodes, smallest
//     capacity first (solvers/sub_scenario_emitter.go).
//   - A try evicts the chosen victims, then places the pending job and
//     every victim again in allocate's order, pipeline-only
//     (common.TryToVirtuallyAllocatePreemptorAndGetVictims). A victim
//     placed back on its own node simply stays (Statement.Pipeline
//     unevicts it); a fraction moved to another device of its node moves.
//   - A try counts only if every victim lands somewhere
//     (consolidation.go: allPodsReallocated); otherwise nothing changes.
//     Non-preemptible jobs never move.
func (c *cycle) consolidate() {
	clear(c.failByKind)
	var cs *consolidation
	// KAI pops preemptors one at a time from an order re-evaluated after
	// each (JobsOrderByQueues.PopNextJob); only the served job's queue
	// changes, since moved jobs keep what they hold.
	o := c.newJobQueue(func(j int) bool { return c.jobs[j].job.Preemptible })
	for j := o.next(); j >= 0; j = o.next() {
		tasks := c.nextTasks(j)
		js := &c.jobs[j]
		req := js.request(tasks)
		if c.gate(j, req) != "" {
			continue
		}
		key := c.shapeKey(j, tasks)
		if _, failed := c.failByKind[key]; failed {
			continue
		}
		if cs == nil {
			cs = c.newConsolidation()
		}
		if cs.total < req[GPU] {
			c.failByKind[key] = failure{}
			continue
		}
		if cs.tries >= consolidateMaxTries {
			return
		}
		if c.consolidateFor(cs, j, tasks) {
			js.reason = ""
			continue
		}
		c.failByKind[key] = failure{}
	}
}

// nextTasks is what job j would place next: the members it misses to
// reach its minimum, else one elastic extra.
func (c *cycle) nextTasks(j int) []int {
	toMin, extra := c.pendingTasks(j)
	if len(toMin) > 0 {
		return toMin
	}
	return extra[:min(1, len(extra))]
}

// consolidateMaxTries bounds the scenarios one cycle simulates, so a
// large fragmented cluster costs a bounded time (KAI bounds the search by
// a deadline instead, solvers/search_budget.go).
const consolidateMaxTries = 2048

// consolidation is the state of one consolidate action.
type consolidation struct {
	soon   []int64 // per schedulable node: GPUs free or being freed
	total  int64   // their sum
	x      *victimIndex
	leaves []int // queues with jobs that may move
	rank   []int // per queue: its place in the queue order at the start
	tries  int
}

func (c *cycle) newConsolidation() *consolidation {
	cs := &consolidation{soon: make([]int64, len(c.nodes))}
	for n := c.idx.all.next(0, nil); n >= 0; n = c.idx.all.next(n+1, nil) {
		cs.soon[n] = c.gpusSoon(n)
		cs.total += cs.soon[n]
	}
	return cs
}

// searchable builds, the first time a job is searched for, what every
// search of the action shares: the victim index and the queue order.
func (c *cycle) searchable(cs *consolidation) {
	if cs.x != nil {
		return
	}
	cs.x, cs.rank = c.buildVictimIndex(), make([]int, len(c.queues))
	for q := range cs.x.byQueue {
		if len(cs.x.byQueue[q]) > 0 {
			cs.leaves = append(cs.leaves, q)
		}
	}
	for i, q := range c.leafOrder() {
		cs.rank[q] = i
	}
}

// refresh recomputes the GPUs free or being freed on the nodes the
// changes logged since mark touched.
func (c *cycle) refresh(cs *consolidation, mark int) {
	for i := mark; i < len(c.log); i++ {
		slot := &c.jobs[c.log[i].job].tasks[c.log[i].task]
		for _, n := range [2]int32{slot.node, slot.oldNode} {
			if n >= 0 && c.idx.all.has(int(n)) {
				cs.total -= cs.soon[n]
				cs.soon[n] = c.gpusSoon(int(n))
				cs.total += cs.soon[n]
			}
		}
	}
}

// gpusSoon is node n's GPU capacity that is free or being freed.
func (c *cycle) gpusSoon(n int) int64 {
	var s int64
	for p := range c.nodes[n].devs {
		s += OneGPU - c.nodes[n].devs[p].used
	}
	return s
}

// movable reports whether job v may be moved now: preemptible, running,
// and none of its tasks placed or moved earlier in this cycle.
func (c *cycle) movable(v int) bool {
	js := &c.jobs[v]
	if !js.job.Preemptible || js.queue < 0 || js.active == 0 {
		return false
	}
	for t := range js.tasks {
		if s := js.tasks[t].state; s == tsBound || s == tsPipelined || s == tsEvicted {
			return false
		}
	}
	return true
}

// victimBatches lists, in KAI's victim order (victims_order.go: queues
// KAI would serve last first, then lowest priority, elastic state and the
// newest submission), the batches the first consolidateMaxVictims usable
// jobs give: a victim must still be movable, run on a node j may use, and
// hold GPUs when j needs GPUs. An elastic job gives its extras one at a
// time before its core.
func (c *cycle) victimBatches(cs *consolidation, j int, req Resources) []victimBatch {
	vq := c.newVictimQueue(cs.x, j, cs.leaves, func(v int) bool { return c.movable(v) && c.helps(v, j, req) })
	var out []victimBatch
	jobs := map[int]bool{}
	for {
		b, ok := vq.next()
		if !ok {
			return out
		}
		if !jobs[b.job] {
			if len(jobs) == consolidateMaxVictims {
				return out
			}
			jobs[b.job] = true
		}
		out = append(out, b)
	}
}

// helps reports whether moving v could free something job j needs.
func (c *cycle) helps(v, j int, req Resources) bool {
	el := c.jobs[j].eligible
	vs := &c.jobs[v]
	on, gpus := false, false
	for t := range vs.tasks {
		if vs.tasks[t].state != tsRunning {
			continue
		}
		if el == nil || el.has(int(vs.tasks[t].node)) {
			on = true
			gpus = gpus || vs.job.Tasks[t].GPU > 0
		}
	}
	return on && (req[GPU] == 0 || gpus)
}

// consolidateFor searches for a set of victims whose moving lets job j's
// tasks fit, and commits the first that works.
func (c *cycle) consolidateFor(cs *consolidation, j int, tasks []int) bool {
	js := &c.jobs[j]
	req := js.request(tasks)
	c.searchable(cs)
	batches := c.victimBatches(cs, j, req)
	if len(batches) == 0 {
		return false
	}
	v := c.newView(cs, j, tasks)
	tried := map[string]bool{}
	for i := range batches {
		acc := batches[:i+1]
		if !c.mayFit(v, acc) {
			continue
		}
		for _, sub := range c.subScenarios(v, acc) {
			key := fingerprint(sub)
			if tried[key] {
				continue
			}
			tried[key] = true
			if cs.tries++; cs.tries > consolidateMaxTries {
				return false
			}
			mark := len(c.log)
			if c.tryMoves(cs, j, tasks, sub) {
				c.refresh(cs, mark)
				return true
			}
		}
	}
	return false
}

// view is what the search for one pending job reads of the cluster: its
// tasks' GPU requests, largest first, and the nodes it may use.
type view struct {
	soon     []int64
	need     []int64 // GPUs per pending task, largest first
	top      []int   // the len(need) nodes with the most GPUs free or being freed
	eligible bitset  // nil: every node
	total    int64   // GPUs free or being freed on the nodes it may use
}

func (c *cycle) newView(cs *consolidation, j int, tasks []int) *view {
	js := &c.jobs[j]
	v := &view{soon: cs.soon, eligible: js.eligible}
	for _, t := range tasks {
		v.need = append(v.need, js.job.Tasks[t].GPU)
	}
	slices.SortFunc(v.need, func(a, b int64) int { return cmpInt64(b, a) })
	for n := c.idx.all.next(0, v.eligible); n >= 0; n = c.idx.all.next(n+1, v.eligible) {
		g := cs.soon[n]
		v.total += g
		if len(v.top) == len(v.need) && (g == 0 || g <= cs.soon[v.top[len(v.top)-1]]) {
			continue
		}
		i, _ := slices.BinarySearchFunc(v.top, g, func(m int, g int64) int { return cmpInt64(g, cs.soon[m]) })
		if i < len(v.need) {
			v.top = slices.Insert(v.top, i, n)
			if len(v.top) > len(v.need) {
				v.top = v.top[:len(v.need)]
			}
		}
	}
	return v
}

func fingerprint(bs []victimBatch) string {
	b := make([]byte, 0, 8*len(bs))
	for _, x := range bs {
		b = strconv.AppendInt(b, int64(x.job), 36)
		for _, t := range x.tasks {
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(t), 36)
		}
		b = append(b, ';')
	}
	return string(b)
}

// victimGPUs returns, per node, the GPUs the batches' tasks hold there.
func (c *cycle) victimGPUs(bs []victimBatch) map[int]int64 {
	out := map[int]int64{}
	for _, b := range bs {
		for _, t := range b.tasks {
			out[int(c.jobs[b.job].tasks[t].node)] += c.jobs[b.job].job.Tasks[t].GPU
		}
	}
	return out
}

// mayFit is KAI's accumulated idle-GPU filter: with the victims' GPUs
// counted as free, the pending tasks, largest first, must each find a node
// among those with the most such GPUs.
func (c *cycle) mayFit(v *view, acc []victimBatch) bool {
	if len(v.need) == 0 || v.need[0] == 0 {
		return true
	}
	extra := c.victimGPUs(acc)
	var rooms []int64
	for _, n := range v.top {
		if _, has := extra[n]; !has {
			rooms = append(rooms, v.soon[n])
		}
	}
	for n, g := range extra {
		if v.eligible == nil || v.eligible.has(n) {
			rooms = append(rooms, v.soon[n]+g)
		}
	}
	desc := func(a, b int64) int { return cmpInt64(b, a) }
	slices.SortFunc(rooms, desc)
	for _, g := range v.need {
		if len(rooms) == 0 || rooms[0] < g {
			return false
		}
		rooms[0] -= g
		slices.SortFunc(rooms, desc)
	}
	return true
}

// subScenarios picks, from the accumulated victims, those on a growing
// prefix of their nodes: nodes that could hold the smallest pending task
// once cleared, least capacity first, starting with the fewest whose
// capacity with the rest of the cluster's covers the request; each node
// brings every batch with a task on it.
func (c *cycle) subScenarios(v *view, acc []victimBatch) [][]victimBatch {
	var demand int64
	for _, g := range v.need {
		demand += g
	}
	minTask := v.need[len(v.need)-1]
	soon := v.soon
	extra := c.victimGPUs(acc)
	first := map[int]int{}
	var nodes []int
	for i, b := range acc {
		for _, t := range b.tasks {
			n := int(c.jobs[b.job].tasks[t].node)
			if _, seen := first[n]; !seen {
				first[n] = i
				nodes = append(nodes, n)
			}
		}
	}
	baseline := v.total
	for n := range first {
		if v.eligible == nil || v.eligible.has(n) {
			baseline -= soon[n]
		}
	}
	nodes = slices.DeleteFunc(nodes, func(n int) bool { return minTask > 0 && soon[n]+extra[n] < minTask })
	slices.SortStableFunc(nodes, func(a, b int) int {
		if ca, cb := soon[a]+extra[a], soon[b]+extra[b]; ca != cb {
			return cmpInt64(ca, cb)
		}
		return first[a] - first[b]
	})
	k, covered := 0, baseline
	for k < len(nodes) && covered < demand {
		covered += soon[nodes[k]] + extra[nodes[k]]
		k++
	}
	if covered < demand {
		return nil
	}
	var out [][]victimBatch
	for step := 1; ; step *= 2 {
		picked := map[int]bool{}
		for _, n := range nodes[:k] {
			picked[n] = true
		}
		var sub []victimBatch
		for _, b := range acc {
			for _, t := range b.tasks {
				if picked[int(c.jobs[b.job].tasks[t].node)] {
					sub = append(sub, b)
					break
				}
			}
		}
		if len(sub) > 0 {
			out = append(out, sub)
		}
		if k == len(nodes) {
			return out
		}
		k = min(k+step, len(nodes))
	}
}
