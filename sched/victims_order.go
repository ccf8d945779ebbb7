package sched

import "math"

// victimBatch is one step of the victim search: the tasks of one job that
// go together, either one elastic extra or every running task of a job at
// (or below) its minimum members (KAI podgroup_info.GetTasksToEvict).
type victimBatch struct {
	job   int
	tasks []int
	gpu   int64 // milli-GPUs the batch frees
	core  bool  // the job's last running tasks: it stops with them
}

// victimQueue yields victims one batch at a time in KAI's order
// (actions/utils.JobsOrderByQueues with VictimQueue): walking down the
// queue tree, the queue KAI's proportion plugin would serve last goes
// first, and inside a leaf its jobs in victimIndex order. A job that gave
// up an elastic extra goes back into its queue with one task fewer.
type victimQueue struct {
	c      *cycle
	x      *victimIndex
	j      int
	ok     func(v int) bool // may v be a victim for j at all
	leaf   []bool           // leaf queues victims may come from
	cursor []int
	back   [][]int32 // per queue: jobs returned after giving up an extra, in order
	taken  map[int]int
	popped []Resources // per queue: what its popped victims hold
}

func (c *cycle) newVictimQueue(x *victimIndex, j int, queues []int, ok func(v int) bool) *victimQueue {
	vq := &victimQueue{c: c, x: x, j: j, ok: ok, leaf: make([]bool, len(c.queues)), cursor: make([]int, len(c.queues)),
		back: make([][]int32, len(c.queues)), taken: map[int]int{}, popped: make([]Resources, len(c.queues))}
	for _, q := range queues {
		list := x.byQueue[q]
		for x.start[q] < len(list) && !c.stillRunning(int(list[x.start[q]])) {
			x.start[q]++
		}
		vq.leaf[q] = true
		vq.cursor[q] = x.start[q]
	}
	return vq
}

// head returns the next victim of leaf q, or -1.
func (vq *victimQueue) head(q int) int {
	if !vq.leaf[q] {
		return -1
	}
	c, list := vq.c, vq.x.byQueue[q]
	for vq.cursor[q] < len(list) {
		v := int(list[vq.cursor[q]])
		if _, seen := vq.taken[v]; !seen && v != vq.j && c.stillRunning(v) && vq.ok(v) {
			break
		}
		vq.cursor[q]++
	}
	best := -1
	if vq.cursor[q] < len(list) {
		best = int(list[vq.cursor[q]])
	}
	if b := vq.back[q]; len(b) > 0 {
		v := int(b[0])
		if best < 0 || c.victimCompare(v, best, vq.taken[v], 0) < 0 {
			return v
		}
	}
	if best < 0 {
		vq.leaf[q] = len(vq.back[q]) > 0
	}
	return best
}

// next returns the next batch, or false when no victim is left.
func (vq *victimQueue) next() (victimBatch, bool) {
	q := vq.bestIn(-1)
	if q < 0 {
		return victimBatch{}, false
	}
	c := vq.c
	v := vq.head(q)
	fromBack := len(vq.back[q]) > 0 && int(vq.back[q][0]) == v
	if fromBack {
		vq.back[q] = vq.back[q][1:]
	} else {
		vq.cursor[q]++
	}
	taken := vq.taken[v]
	js := &c.jobs[v]
	run := c.runningTasks(v) // newest first; the first taken already went
	if taken >= len(run) {
		vq.taken[v] = len(c.jobs[v].tasks) // nothing left to give
		return vq.next()
	}
	run = run[taken:]
	b := victimBatch{job: v}
	if js.active-taken > js.minM {
		b.tasks = run[:1]
		vq.taken[v] = taken + 1
		vq.back[q] = append(vq.back[q], int32(v))
		slicesSortBack(c, vq.back[q], vq.taken)
	} else {
		b.tasks, b.core = run, true
		vq.taken[v] = taken + len(run)
	}
	for _, t := range b.tasks {
		r := js.job.Tasks[t].Request()
		b.gpu += r[GPU]
		for _, a := range c.queues[q].path {
			vq.popped[a] = vq.popped[a].Add(r)
		}
	}
	return b, true
}

func slicesSortBack(c *cycle, b []int32, taken map[int]int) {
	for i := len(b) - 1; i > 0; i-- {
		if c.victimCompare(int(b[i]), int(b[i-1]), taken[int(b[i])], taken[int(b[i-1])]) >= 0 {
			return
		}
		b[i], b[i-1] = b[i-1], b[i]
	}
}

// bestIn returns the leaf that gives the next victim below queue p (-1:
// among the top-level queues), or -1 when none has one.
func (vq *victimQueue) bestIn(p int) int {
	c := vq.c
	var kids []int
	if p < 0 {
		for q := range c.queues {
			if c.queues[q].parent < 0 {
				kids = append(kids, q)
			}
		}
	} else {
		kids = c.queues[p].children
		if len(kids) == 0 {
			if vq.head(p) >= 0 {
				return p
			}
			return -1
		}
	}
	best, bestLeaf := -1, -1
	for _, ch := range kids {
		leaf := vq.bestIn(ch)
		if leaf < 0 {
			continue
		}
		if best < 0 || vq.before(ch, leaf, best, bestLeaf) {
			best, bestLeaf = ch, leaf
		}
	}
	return bestLeaf
}

// before reports whether queue a (whose next victim comes from leaf la)
// gives victims before queue b: KAI's queue order (plugins/proportion/
// queue_order.GetQueueOrderResult) reversed. Queues over their fair share
// in every resource first, then those over their deserved quota, then
// lower queue priority, then queues holding resources they have no share
// of, then the larger dominant share once the victims taken so far and the
// next one are gone, then the larger share as it is, then the larger
// allocatable share, then the queue created later.
func (vq *victimQueue) before(a, la, b, lb int) bool {
	c := vq.c
	qa, qb := &c.queues[a], &c.queues[b]
	if oa, ob := c.overFairShareEverywhere(a), c.overFairShareEverywhere(b); oa != ob {
		return oa
	}
	if sa, sb := c.withinDeserved(a, Resources{}), c.withinDeserved(b, Resources{}); sa != sb {
		return sb
	}
	if qa.q.Priority != qb.q.Priority {
		return qa.q.Priority < qb.q.Priority
	}
	if za, zb := c.holdsWithoutShare(a), c.holdsWithoutShare(b); za != zb {
		return za
	}
	if da, db := c.dominantShare(a, vq.pendingVictims(a, la), vq.x.total), c.dominantShare(b, vq.pendingVictims(b, lb), vq.x.total); da != db {
		return da > db
	}
	if da, db := c.dominantShare(a, Resources{}, vq.x.total), c.dominantShare(b, Resources{}, vq.x.total); da != db {
		return da > db
	}
	aa, ab := c.allocatable(a), c.allocatable(b)
	if lessSomewhere(ab, aa) && lessEqual(ab, aa) {
		return true
	}
	if lessSomewhere(aa, ab) && lessEqual(aa, ab) {
		return false
	}
	return a > b
}

// pendingVictims is what the victims popped from leaf l so far and its
// next one hold (KAI compares a subtree by its best leaf's victims).
func (vq *victimQueue) pendingVictims(_ int, l int) Resources {
	r := vq.popped[l]
	if v := vq.head(l); v >= 0 {
		js := &vq.c.jobs[v]
		for _, t := range vq.c.runningTasks(v) {
			r = r.Add(js.job.Tasks[t].Request())
		}
	}
	return r
}

// allocatable is what a queue may hold before others can take it back:
// its deserved quota or fair share, whichever is larger, within its limit
// (KAI resource_share.ResourceShare.GetAllocatableShare).
func (c *cycle) allocatable(q int) Resources {
	qs := &c.queues[q]
	var out Resources
	for r := range out {
		if qs.quota[r] == Unlimited {
			out[r] = qs.limit[r]
			continue
		}
		out[r] = max(qs.quota[r], qs.fair[r])
		if qs.limit[r] != Unlimited {
			out[r] = min(out[r], qs.limit[r])
		}
	}
	return out
}

// overFairShareEverywhere: allocated above fair share in every resource
// (KAI QueueResourceShare.FairShareLessThanAllocated).
func (c *cycle) overFairShareEverywhere(q int) bool {
	qs := &c.queues[q]
	for r := range qs.alloc {
		if qs.fair[r] >= qs.alloc[r] {
			return false
		}
	}
	return true
}

// withinDeserved: allocated plus add stays within the deserved quota in
// every resource (KAI AllocatedPlusResourcesLessEqualDeserved).
func (c *cycle) withinDeserved(q int, add Resources) bool {
	qs := &c.queues[q]
	for r := range qs.alloc {
		if qs.quota[r] != Unlimited && qs.alloc[r]+add[r] > qs.quota[r] {
			return false
		}
	}
	return true
}

// holdsWithoutShare: the queue holds a resource it may hold none of.
func (c *cycle) holdsWithoutShare(q int) bool {
	al := c.allocatable(q)
	for r := range al {
		if al[r] == 0 && c.queues[q].alloc[r] > 0 {
			return true
		}
	}
	return false
}

// dominantShare is the queue's largest allocated/allocatable ratio once
// minus is gone (KAI GetDominantResourceShare: an unlimited share counts
// the whole cluster, a zero share weighs 1000 per unit held).
func (c *cycle) dominantShare(q int, minus, total Resources) float64 {
	qs := &c.queues[q]
	al := c.allocatable(q)
	var worst float64
	for r := range al {
		held := float64(qs.alloc[r] - minus[r])
		share := float64(al[r])
		if al[r] == Unlimited {
			share = float64(total[r])
		}
		v := held * 1000
		if share != 0 {
			v = held / share
		}
		worst = math.Max(worst, v)
	}
	return worst
}

// capacity is every resource in the cluster.
func (c *cycle) capacity() Resources {
	var t Resources
	for n := range c.nodes {
		ns := &c.nodes[n]
		t[GPU] += int64(len(ns.devs)) * OneGPU
		t[CPU] += ns.node.CPU
		t[Memory] += ns.node.Memory
	}
	return t
}

func lessEqual(a, b Resources) bool {
	for r := range a {
		if !leq(a[r], b[r]) {
			return false
		}
	}
	return true
}

// lessSomewhere: a is below b in at least one resource.
func lessSomewhere(a, b Resources) bool { return !lessEqual(b, a) }

// leq compares two amounts where Unlimited is above everything.
func leq(a, b int64) bool {
	switch {
	case b == Unlimited:
		return true
	case a == Unlimited:
		return false
	}
	return a <= b
}
