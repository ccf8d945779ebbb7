package sched

// Queue and job order: which waiting job an action serves next. Every
// action that places jobs (allocate, consolidate, reclaim, preempt) builds
// its own ordered list from the cycle's state, as KAI Scheduler's actions
// each build a JobsOrderByQueues from the session; none depends on an
// earlier action having run. KAI's rules, each with its source:
//
//   - The queue tree is walked from the top: at each level the child that
//     goes first is chosen, then the same among its children, down to a
//     leaf, whose first job is served (actions/utils/job_order_by_queue.go:
//     PopNextJob, traverseToLeaf). A parent is compared by its own share
//     and the next job of the leaf that goes first inside it
//     (getBestJobFromNode), so a parent further below its share wins
//     before the leaves inside it are compared.
//   - Two sibling queues, the first rule that tells them apart decides
//     (plugins/proportion/queue_order/queue_order.go: GetQueueOrderResult):
//     1. a queue above its fair share in every resource goes after one
//     that is not (prioritizeUnderUtilized);
//     2. a queue that stays within its deserved quota with its next job
//     goes before one that would exceed it (prioritizeUnderQuotaWithJob);
//     3. the higher queue priority (prioritizePrioritized);
//     4. a queue that would hold, with its next job, a resource it has no
//     allocatable share of goes after (penalizeZeroShareWithJob);
//     5. the smaller dominant share with its next job: the largest of
//     allocated/allocatable over gpu, cpu and memory, so cpu- or
//     memory-only jobs are ordered by their own dominant resource
//     (prioritizeSmallerResourceShare, resource_share
//     GetDominantResourceShare; allocatable is the larger of deserved and
//     fair share, within the limit: ResourceShare.GetAllocatableShare);
//     6. the smaller dominant share as it is
//     (prioritizeSmallerResourceShareWithoutTask);
//     7. the smaller allocatable share (prioritizeBasedOnAllocatableShare);
//     8. the queue created first: here, listed first
//     (prioritizeBasedOnCreationTime).
//   - Jobs of one leaf: higher priority first (plugins/priority
//     JobOrderFn), then jobs below their minimum members before jobs at it
//     before jobs above it (plugins/elastic JobOrderFn), then the oldest
//     (framework/session_plugins.go JobOrderFn's creation-time fallback).
//   - A job's "next job" resources are what it would place next: the
//     members it misses to reach its minimum, else one elastic extra
//     (podgroup_info/allocation_info.go GetTasksToAllocate).

// jobQueue hands out waiting jobs in KAI's order. Allocate takes one job at
// a time and pushes a job that grew back in (actions/allocate Execute); the
// order is re-evaluated on every take from the state as it is then, which
// only the taken job's placement may have changed (only its queue and
// ancestors are compared again: a caller that changes other queues between
// takes must build a new jobQueue).
type jobQueue struct {
	c     *cycle
	total Resources
	jobs  [][]int32 // per queue: its waiting jobs, a heap in job order
	best  []int32   // per queue (the last entry: the root): the leaf served first below it; -1: none
	dirty []bool
	req   []Resources // per leaf: what its first job would place next
	tops  []int
}

// newJobQueue orders the jobs that have tasks to place and pass keep (nil:
// all of them).
func (c *cycle) newJobQueue(keep func(j int) bool) *jobQueue {
	n := len(c.queues)
	o := &jobQueue{c: c, total: c.capacity(), jobs: make([][]int32, n), best: make([]int32, n+1),
		dirty: make([]bool, n+1), req: make([]Resources, n)}
	for q := range c.queues {
		if c.queues[q].parent < 0 {
			o.tops = append(o.tops, q)
		}
		for _, j := range c.queues[q].jobs {
			if c.hasTasksToPlace(j) && (keep == nil || keep(j)) {
				o.jobs[q] = append(o.jobs[q], int32(j))
			}
		}
		o.heapify(q)
	}
	for i := range o.dirty {
		o.dirty[i] = true
	}
	return o
}

// hasTasksToPlace reports whether job j has a task an action could place
// now: one it misses to reach its minimum, or an elastic extra.
func (c *cycle) hasTasksToPlace(j int) bool {
	if c.jobs[j].queue < 0 || c.countPending(j) == 0 {
		return false
	}
	toMin, extra := c.pendingTasks(j)
	return len(toMin) > 0 || len(extra) > 0
}

// nextRequest is what job j would place next: the members it misses to
// reach its minimum, else one elastic extra.
func (c *cycle) nextRequest(j int) Resources {
	js := &c.jobs[j]
	short := js.minM - js.active
	var r Resources
	for t := range js.tasks {
		if js.tasks[t].state != tsPending {
			continue
		}
		r = r.Add(js.job.Tasks[t].Request())
		if short--; short <= 0 {
			break
		}
	}
	return r
}

// next takes the job that goes first, or returns -1 when none is left.
func (o *jobQueue) next() int {
	l := o.bestBelow(len(o.c.queues))
	if l < 0 {
		return -1
	}
	h := o.jobs[l]
	j := int(h[0])
	last := len(h) - 1
	h[0] = h[last]
	o.jobs[l] = h[:last]
	o.down(l, 0)
	o.touch(l)
	return j
}

// push puts job j back (it placed tasks and has more to place).
func (o *jobQueue) push(j int) {
	q := o.c.jobs[j].queue
	o.jobs[q] = append(o.jobs[q], int32(j))
	o.up(q, len(o.jobs[q])-1)
	o.touch(q)
}

// touch marks queue q and its ancestors for re-evaluation.
func (o *jobQueue) touch(q int) {
	for _, a := range o.c.queues[q].path {
		o.dirty[a] = true
	}
	o.dirty[len(o.c.queues)] = true
}

// bestBelow returns the leaf whose first job goes first below queue p (p
// == len(queues): the root), or -1. A queue's own jobs (a parent's, which
// KAI never serves) come after its children's.
func (o *jobQueue) bestBelow(p int) int {
	if !o.dirty[p] {
		return int(o.best[p])
	}
	o.dirty[p] = false
	kids := o.tops
	if p < len(o.c.queues) {
		kids = o.c.queues[p].children
	}
	best, bestKid := -1, -1
	for _, ch := range kids {
		l := o.bestBelow(ch)
		if l >= 0 && (best < 0 || o.before(ch, l, bestKid, best)) {
			best, bestKid = l, ch
		}
	}
	if best < 0 && p < len(o.c.queues) && len(o.jobs[p]) > 0 {
		best = p
		o.req[p] = o.c.nextRequest(int(o.jobs[p][0]))
	}
	o.best[p] = int32(best)
	return best
}

// before reports whether sibling queue a, whose next job comes from leaf
// la, goes before sibling b, whose next job comes from leaf lb
// (GetQueueOrderResult; see the rules above).
func (o *jobQueue) before(a, la, b, lb int) bool {
	c := o.c
	ra, rb := o.req[la], o.req[lb]
	if oa, ob := c.overFairShareEverywhere(a), c.overFairShareEverywhere(b); oa != ob {
		return ob
	}
	if sa, sb := c.withinDeserved(a, ra), c.withinDeserved(b, rb); sa != sb {
		return sa
	}
	if pa, pb := c.queues[a].q.Priority, c.queues[b].q.Priority; pa != pb {
		return pa > pb
	}
	if za, zb := c.holdsWithoutShareWith(a, ra), c.holdsWithoutShareWith(b, rb); za != zb {
		return zb
	}
	if da, db := c.dominantShare(a, Resources{}.Sub(ra), o.total), c.dominantShare(b, Resources{}.Sub(rb), o.total); da != db {
		return da < db
	}
	if da, db := c.dominantShare(a, Resources{}, o.total), c.dominantShare(b, Resources{}, o.total); da != db {
		return da < db
	}
	aa, ab := c.allocatable(a), c.allocatable(b)
	if lessSomewhere(aa, ab) && lessEqual(aa, ab) {
		return true
	}
	if lessSomewhere(ab, aa) && lessEqual(ab, aa) {
		return false
	}
	return a < b
}

// holdsWithoutShareWith: with add placed, queue q would hold a resource
// it has no allocatable share of (KAI penalizeZeroShareWithJob).
func (c *cycle) holdsWithoutShareWith(q int, add Resources) bool {
	al := c.allocatable(q)
	for r := range al {
		if al[r] == 0 && c.queues[q].alloc[r]+add[r] > 0 {
			return true
		}
	}
	return false
}

// jobBefore is KAI's job order inside a leaf queue: priority, then
// members below, at and above the minimum, then age.
func (c *cycle) jobBefore(a, b int) bool {
	ja, jb := &c.jobs[a], &c.jobs[b]
	if ja.job.Priority != jb.job.Priority {
		return ja.job.Priority > jb.job.Priority
	}
	if sa, sb := c.elasticState(a, 0), c.elasticState(b, 0); sa != sb {
		return sa < sb
	}
	return ja.order < jb.order
}

func (o *jobQueue) heapify(q int) {
	for i := len(o.jobs[q])/2 - 1; i >= 0; i-- {
		o.down(q, i)
	}
	if len(o.jobs[q]) > 0 {
		o.req[q] = o.c.nextRequest(int(o.jobs[q][0]))
	}
}

func (o *jobQueue) up(q, i int) {
	h := o.jobs[q]
	for i > 0 {
		p := (i - 1) / 2
		if !o.c.jobBefore(int(h[i]), int(h[p])) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	if len(h) > 0 {
		o.req[q] = o.c.nextRequest(int(h[0]))
	}
}

func (o *jobQueue) down(q, i int) {
	h := o.jobs[q]
	for {
		k := 2*i + 1
		if k >= len(h) {
			break
		}
		if r := k + 1; r < len(h) && o.c.jobBefore(int(h[r]), int(h[k])) {
			k = r
		}
		if !o.c.jobBefore(int(h[k]), int(h[i])) {
			break
		}
		h[i], h[k] = h[k], h[i]
		i = k
	}
	if len(h) > 0 {
		o.req[q] = o.c.nextRequest(int(h[0]))
	}
}

// leafOrder is every queue holding jobs, in the order allocate would serve
// them from the state as it is now: the queues of waiting jobs as the
// job order reaches them, then those whose jobs all run.
func (c *cycle) leafOrder() []int {
	seen := make([]bool, len(c.queues))
	var out []int
	o := c.newJobQueue(nil)
	for j := o.next(); j >= 0; j = o.next() {
		if q := c.jobs[j].queue; !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	for q := range c.queues {
		if !seen[q] && len(c.queues[q].jobs) > 0 {
			out = append(out, q)
		}
	}
	return out
}

// explainUntried gives a reason to every job left waiting that no action
// of the cycle tried to place (an action that evicts found no victims for
// it, and allocate did not run): why it does not fit now.
func (c *cycle) explainUntried() {
	places := false
	for _, a := range c.policy.Actions {
		places = places || a == Allocate || a == Consolidate || a == Reclaim || a == Preempt
	}
	if !places {
		return
	}
	for j := range c.jobs {
		js := &c.jobs[j]
		if js.reason != "" || js.tried {
			continue
		}
		if js.queue < 0 {
			js.setReason(false, "queue "+js.job.Queue+" does not exist")
			continue
		}
		toMin, extra := c.pendingTasks(j)
		if len(toMin) == 0 {
			toMin = extra[:min(1, len(extra))]
		}
		if len(toMin) == 0 {
			continue
		}
		if r := c.gate(j, js.request(toMin)); r != "" {
			js.setReason(false, r)
			continue
		}
		js.setReason(true, c.explainPlacement(j, toMin))
	}
}
