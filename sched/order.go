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
// order is re-evaluated on every take from the state as it is then: the
// taken job's queue and its ancestors are compared again, and so are the
// queues a caller touches (those whose jobs it evicted).
type jobQueue struct {
	c     *cycle
	total Resources
	jobs  [][]heapJob // per queue: its waiting jobs, a heap in job order
	best  []int32     // per queue (the last entry: the root): the leaf served first below it; -1: none
	dirty []bool
	req   []Resources // per leaf: what its first job would place next
	key   []queueKey  // per queue: its standing with the next job below it
	alloc []Resources // per queue: allocatable share (fixed for the cycle)
	tops  []int
}

// heapJob is a waiting job with what the job order reads of it, taken
// when it enters the queue (nothing changes a job while it waits there).
type heapJob struct {
	priority int
	members  int // -1 below its minimum, 0 at it, 1 above
	job      int32
}

// less is KAI's job order inside a leaf queue: priority, then members
// below, at and above the minimum, then age (jobs are numbered oldest
// first).
func (a heapJob) less(b heapJob) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if a.members != b.members {
		return a.members < b.members
	}
	return a.job < b.job
}

func (c *cycle) heapJob(j int) heapJob {
	return heapJob{priority: c.jobs[j].job.Priority, members: c.elasticState(j, 0), job: int32(j)}
}

// queueKey is what GetQueueOrderResult reads of one queue and the next job
// it would serve, computed once each time the queue changes.
type queueKey struct {
	over, within, zero bool
	withJob, now       float64
}

// newJobQueue orders the jobs that have tasks to place and pass keep (nil:
// all of them).
func (c *cycle) newJobQueue(keep func(j int) bool) *jobQueue {
	n := len(c.queues)
	o := &jobQueue{c: c, total: c.capacity(), jobs: make([][]heapJob, n), best: make([]int32, n+1),
		dirty: make([]bool, n+1), req: make([]Resources, n), key: make([]queueKey, n), alloc: make([]Resources, n)}
	for q := range c.queues {
		o.alloc[q] = c.allocatable(q)
		if c.queues[q].parent < 0 {
			o.tops = append(o.tops, q)
		}
	}
	if c.withPending == nil {
		c.withPending = []int32{}
		for j := range c.jobs {
			if c.countPending(j) > 0 {
				c.withPending = append(c.withPending, int32(j))
			}
		}
	}
	for _, j := range c.withPending {
		if j := int(j); c.hasTasksToPlace(j) && (keep == nil || keep(j)) {
			q := c.jobs[j].queue
			o.jobs[q] = append(o.jobs[q], c.heapJob(j))
		}
	}
	for q := range o.jobs {
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
	js := &c.jobs[j]
	if js.queue < 0 {
		return false
	}
	p := c.countPending(j)
	short := js.minM - js.active
	// As pendingTasks: a gang that cannot reach its minimum places nothing.
	return p > 0 && p >= short
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
	j := int(h[0].job)
	last := len(h) - 1
	h[0] = h[last]
	o.jobs[l] = h[:last]
	o.down(l, 0)
	o.mark(l)
	return j
}

// push puts job j back (it placed tasks and has more to place).
func (o *jobQueue) push(j int) {
	q := o.c.jobs[j].queue
	o.jobs[q] = append(o.jobs[q], o.c.heapJob(j))
	o.up(q, len(o.jobs[q])-1)
	o.mark(q)
}

// touch tells the queue that an action changed queue q other than by
// placing the job it took (victims left it): its waiting jobs are ordered
// again (a victim may itself wait for elastic members) and it and its
// ancestors are compared again.
func (o *jobQueue) touch(q int) {
	h := o.jobs[q]
	for i := range h {
		h[i] = o.c.heapJob(int(h[i].job))
	}
	o.heapify(q)
	o.mark(q)
}

// mark marks queue q and its ancestors for re-evaluation.
func (o *jobQueue) mark(q int) {
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
		if l >= 0 && (best < 0 || o.before(ch, bestKid)) {
			best, bestKid = l, ch
		}
	}
	if best < 0 && p < len(o.c.queues) && len(o.jobs[p]) > 0 {
		best = p
		o.req[p] = o.c.nextRequest(int(o.jobs[p][0].job))
	}
	o.best[p] = int32(best)
	if best >= 0 && p < len(o.c.queues) {
		o.key[p] = o.keyOf(p, o.req[best])
	}
	return best
}

// keyOf computes queue q's standing with req, its next job, placed.
func (o *jobQueue) keyOf(q int, req Resources) queueKey {
	c := o.c
	qs := &c.queues[q]
	al := &o.alloc[q]
	k := queueKey{over: c.overFairShareEverywhere(q), within: c.withinDeserved(q, req)}
	for r := range al {
		held, with := float64(qs.alloc[r]), float64(qs.alloc[r]+req[r])
		share := float64(al[r])
		if al[r] == Unlimited {
			share = float64(o.total[r])
		}
		if al[r] == 0 {
			k.zero = k.zero || with > 0
			held, with = held*1000, with*1000 // KAI: no share weighs 1000 per unit held
		} else {
			held, with = held/share, with/share
		}
		k.now, k.withJob = max(k.now, held), max(k.withJob, with)
	}
	return k
}

// before reports whether sibling queue a goes before sibling b, each with
// the next job of the leaf served first below it (GetQueueOrderResult;
// see the rules above).
func (o *jobQueue) before(a, b int) bool {
	ka, kb := &o.key[a], &o.key[b]
	if ka.over != kb.over {
		return kb.over
	}
	if ka.within != kb.within {
		return ka.within
	}
	if pa, pb := o.c.queues[a].q.Priority, o.c.queues[b].q.Priority; pa != pb {
		return pa > pb
	}
	if ka.zero != kb.zero {
		return kb.zero
	}
	if ka.withJob != kb.withJob {
		return ka.withJob < kb.withJob
	}
	if ka.now != kb.now {
		return ka.now < kb.now
	}
	aa, ab := o.alloc[a], o.alloc[b]
	if lessSomewhere(aa, ab) && lessEqual(aa, ab) {
		return true
	}
	if lessSomewhere(ab, aa) && lessEqual(ab, aa) {
		return false
	}
	return a < b
}

func (o *jobQueue) heapify(q int) {
	for i := len(o.jobs[q])/2 - 1; i >= 0; i-- {
		o.down(q, i)
	}
}

func (o *jobQueue) up(q, i int) {
	h := o.jobs[q]
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (o *jobQueue) down(q, i int) {
	h := o.jobs[q]
	for {
		k := 2*i + 1
		if k >= len(h) {
			break
		}
		if r := k + 1; r < len(h) && h[r].less(h[k]) {
			k = r
		}
		if !h[k].less(h[i]) {
			break
		}
		h[i], h[k] = h[k], h[i]
		i = k
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
