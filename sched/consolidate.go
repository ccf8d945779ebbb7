package sched

import (
	"slices"
	"strconv"
	"time"
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
//     (podgroup_info.GetTasksToEvict), queues furthest above their fair
//     share first, then lowest priority and youngest; at most 16 jobs.
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
	for _, j := range c.consolidationPreemptors() {
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

// consolidationPreemptors lists the preemptible jobs with tasks to place,
// queues in their order at the start of the action, each queue's jobs by
// priority then age.
func (c *cycle) consolidationPreemptors() []int {
	var out []int
	for _, q := range c.leafOrder() {
		for _, j := range c.queues[q].jobs {
			if c.jobs[j].job.Preemptible && c.countPending(j) > 0 && len(c.nextTasks(j)) > 0 {
				out = append(out, j)
			}
		}
	}
	return out
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
	soon    []int64 // per schedulable node: GPUs free or being freed
	total   int64   // their sum
	victims []int   // movable jobs at the start, in victim order
	rank    []int   // per queue: its place in the queue order at the start
	tries   int
}

func (c *cycle) newConsolidation() *consolidation {
	cs := &consolidation{soon: make([]int64, len(c.nodes)), victims: c.consolidationVictims(),
		rank: make([]int, len(c.queues))}
	for i, q := range c.leafOrder() {
		cs.rank[q] = i
	}
	for n := c.idx.all.next(0, nil); n >= 0; n = c.idx.all.next(n+1, nil) {
		cs.soon[n] = c.gpusSoon(n)
		cs.total += cs.soon[n]
	}
	return cs
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

// consolidationVictims lists the movable jobs in KAI's victim order:
// queues furthest above their fair share first, then within a queue the
// lowest priority, the youngest and the newest submission first.
func (c *cycle) consolidationVictims() []int {
	var out []int
	ratio := make([]float64, len(c.queues))
	for q := range c.queues {
		ratio[q] = c.shareRatio(q)
	}
	runtime := map[int]time.Duration{}
	for v := range c.jobs {
		if c.movable(v) {
			out = append(out, v)
			runtime[v] = c.youngestTask(v)
		}
	}
	slices.SortStableFunc(out, func(a, b int) int {
		ja, jb := &c.jobs[a], &c.jobs[b]
		if ra, rb := ratio[ja.queue], ratio[jb.queue]; ra != rb {
			if ra > rb {
				return -1
			}
			return 1
		}
		if ja.queue != jb.queue {
			return ja.queue - jb.queue
		}
		if ja.job.Priority != jb.job.Priority {
			return ja.job.Priority - jb.job.Priority
		}
		if runtime[a] != runtime[b] {
			return cmpInt64(int64(runtime[a]), int64(runtime[b]))
		}
		return b - a
	})
	return out
}

// youngestTask is the shortest runtime among job v's running tasks.
func (c *cycle) youngestTask(v int) time.Duration {
	js := &c.jobs[v]
	rt := time.Duration(-1)
	for t := range js.tasks {
		if js.tasks[t].state == tsRunning && (rt < 0 || js.job.Tasks[t].Runtime < rt) {
			rt = js.job.Tasks[t].Runtime
		}
	}
	return rt
}

// batch is what one victim gives up in one step: one elastic extra task,
// or every running task of a job at its minimum.
type batch struct {
	job   int
	tasks []int
}

// victimBatches splits the victims usable for job j into batches, at
// most consolidateMaxVictims jobs: a victim must still be movable, run
// on a node j may use, and hold GPUs when j needs GPUs.
func (c *cycle) victimBatches(j int, req Resources, victims []int) []batch {
	var out []batch
	jobs := 0
	for _, v := range victims {
		if v == j || !c.movable(v) || !c.helps(v, j, req) {
			continue
		}
		if jobs++; jobs > consolidateMaxVictims {
			break
		}
		js := &c.jobs[v]
		var running []int // newest member first
		for t := len(js.tasks) - 1; t >= 0; t-- {
			if js.tasks[t].state == tsRunning {
				running = append(running, t)
			}
		}
		extras := js.active - js.minM
		for i := 0; i < extras && i < len(running); i++ {
			out = append(out, batch{v, running[i : i+1]})
		}
		if extras < len(running) {
			out = append(out, batch{v, running[max(extras, 0):]})
		}
	}
	return out
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
	batches := c.victimBatches(j, req, cs.victims)
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

func fingerprint(bs []batch) string {
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
func (c *cycle) victimGPUs(bs []batch) map[int]int64 {
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
func (c *cycle) mayFit(v *view, acc []batch) bool {
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
func (c *cycle) subScenarios(v *view, acc []batch) [][]batch {
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
	var out [][]batch
	for step := 1; ; step *= 2 {
		picked := map[int]bool{}
		for _, n := range nodes[:k] {
			picked[n] = true
		}
		var sub []batch
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
