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
	var victims []int
	built := false
	for _, p := range c.consolidationPreemptors() {
		j, tasks := p.job, p.tasks
		js := &c.jobs[j]
		req := js.request(tasks)
		if c.gate(j, req) != "" {
			continue
		}
		key := c.shapeKey(j, tasks)
		if _, failed := c.failByKind[key]; failed {
			continue
		}
		if !c.enoughGPUsSoon(req[GPU]) {
			c.failByKind[key] = failure{}
			continue
		}
		if !built {
			victims, built = c.consolidationVictims(), true
		}
		if c.consolidateFor(j, tasks, victims) {
			js.reason = ""
			continue
		}
		c.failByKind[key] = failure{}
	}
}

type preemptor struct {
	job   int
	tasks []int
}

// consolidationPreemptors lists the preemptible jobs with tasks to place,
// in allocate's order, with the tasks allocate would place next.
func (c *cycle) consolidationPreemptors() []preemptor {
	var out []preemptor
	for _, q := range c.leafOrder() {
		for _, j := range c.queues[q].jobs {
			if !c.jobs[j].job.Preemptible || c.countPending(j) == 0 {
				continue
			}
			toMin, extra := c.pendingTasks(j)
			switch {
			case len(toMin) > 0:
				out = append(out, preemptor{j, toMin})
			case len(extra) > 0:
				out = append(out, preemptor{j, extra[:1]})
			}
		}
	}
	return out
}

// enoughGPUsSoon reports whether the schedulable nodes' GPUs that are
// free or being freed add up to gpu.
func (c *cycle) enoughGPUsSoon(gpu int64) bool {
	if gpu == 0 {
		return true
	}
	var sum int64
	for n := c.idx.all.next(0, nil); n >= 0; n = c.idx.all.next(n+1, nil) {
		if sum += c.gpusSoon(n); sum >= gpu {
			return true
		}
	}
	return false
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
func (c *cycle) consolidateFor(j int, tasks []int, victims []int) bool {
	js := &c.jobs[j]
	req := js.request(tasks)
	batches := c.victimBatches(j, req, victims)
	if len(batches) == 0 {
		return false
	}
	soon := make([]int64, len(c.nodes))
	for n := c.idx.all.next(0, js.eligible); n >= 0; n = c.idx.all.next(n+1, js.eligible) {
		soon[n] = c.gpusSoon(n)
	}
	tried := map[string]bool{}
	for i := range batches {
		acc := batches[:i+1]
		if !c.mayFit(j, tasks, acc, soon) {
			continue
		}
		for _, sub := range c.subScenarios(j, tasks, acc, soon) {
			key := fingerprint(sub)
			if tried[key] {
				continue
			}
			tried[key] = true
			if c.tryMoves(j, tasks, sub) {
				return true
			}
		}
	}
	return false
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
func (c *cycle) mayFit(j int, tasks []int, acc []batch, soon []int64) bool {
	js := &c.jobs[j]
	need := make([]int64, 0, len(tasks))
	for _, t := range tasks {
		need = append(need, js.job.Tasks[t].GPU)
	}
	slices.SortFunc(need, func(a, b int64) int { return cmpInt64(b, a) })
	if len(need) == 0 || need[0] == 0 {
		return true
	}
	extra := c.victimGPUs(acc)
	top := make([]int64, 0, len(need)) // the len(need) roomiest nodes, most first
	for n := range soon {
		room := soon[n] + extra[n]
		if room == 0 {
			continue
		}
		i, _ := slices.BinarySearchFunc(top, room, func(a, b int64) int { return cmpInt64(b, a) })
		if i < len(need) {
			top = slices.Insert(top, i, room)
			if len(top) > len(need) {
				top = top[:len(need)]
			}
		}
	}
	for _, g := range need {
		if len(top) == 0 || top[0] < g {
			return false
		}
		top[0] -= g
		slices.SortFunc(top, func(a, b int64) int { return cmpInt64(b, a) })
	}
	return true
}

// subScenarios picks, from the accumulated victims, those on a growing
// prefix of their nodes: nodes that could hold the smallest pending task
// once cleared, least capacity first, starting with the fewest whose
// capacity with the rest of the cluster's covers the request; each node
// brings every batch with a task on it.
func (c *cycle) subScenarios(j int, tasks []int, acc []batch, soon []int64) [][]batch {
	js := &c.jobs[j]
	var demand, minTask int64 = 0, -1
	for _, t := range tasks {
		g := js.job.Tasks[t].GPU
		demand += g
		if minTask < 0 || g < minTask {
			minTask = g
		}
	}
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
	var baseline int64
	for n := range soon {
		if _, has := first[n]; !has {
			baseline += soon[n]
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
