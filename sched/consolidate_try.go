package sched

import "slices"

// tryMoves simulates one consolidation scenario: evict the batches' tasks,
// then place job j's tasks and every victim's evicted tasks again, in
// allocate's order, all pipelined. It keeps the result only if everything
// landed; a victim that landed back where it ran is left running.
func (c *cycle) tryMoves(cs *consolidation, j int, tasks []int, sub []victimBatch) bool {
	mark := len(c.log)
	reason := "moved to make room for job " + c.jobs[j].job.Name
	evicted := map[int][]int{}
	order := []int{j}
	for _, b := range sub {
		for _, t := range b.tasks {
			c.evict(b.job, t, Consolidate, reason)
		}
		if _, seen := evicted[b.job]; !seen {
			order = append(order, b.job)
		}
		evicted[b.job] = append(evicted[b.job], b.tasks...)
	}
	c.sortByAllocateOrder(cs, order)
	for _, x := range order {
		ts := tasks
		if x != j {
			ts = evicted[x]
		}
		m := len(c.log)
		if _, ok := c.placeGang(x, ts, freeSoon, Consolidate); !ok {
			c.rollback(mark)
			return false
		}
		c.pipelineAll(x, m)
	}
	return c.keepReturned(mark, reason)
}

// sortByAllocateOrder orders jobs as KAI's allocate would serve them: by
// their queue's place in the queue order (taken at the start of the
// action), then priority (plugins/priority), then jobs below their
// minimum before those at it before those above it (plugins/elastic
// JobOrderFn), then age.
func (c *cycle) sortByAllocateOrder(cs *consolidation, jobs []int) {
	slices.SortStableFunc(jobs, func(a, b int) int {
		ja, jb := &c.jobs[a], &c.jobs[b]
		if ra, rb := cs.rank[ja.queue], cs.rank[jb.queue]; ra != rb {
			return ra - rb
		}
		if ja.job.Priority != jb.job.Priority {
			return jb.job.Priority - ja.job.Priority
		}
		if ea, eb := elasticState(ja), elasticState(jb); ea != eb {
			return ea - eb
		}
		return ja.order - jb.order
	})
}

// elasticState is 0 below the job's minimum members, 1 at it, 2 above.
func elasticState(js *jobSlot) int {
	switch {
	case js.active < js.minM:
		return 0
	case js.active == js.minM:
		return 1
	}
	return 2
}

// moveRecord is one placement a consolidation scenario made.
type moveRecord struct {
	job, task, node int
	devs            []int
	stays           bool // a victim placed back where it ran
}

// keepReturned turns victims placed back on their own node (a fraction:
// on its own device) into tasks that never moved, as KAI's
// Statement.Pipeline unevicts them. Device positions on a node may then
// clash, so the scenario's placements are replayed node by node after
// rolling it back; it returns false, with nothing changed, if a replay
// finds no devices.
func (c *cycle) keepReturned(mark int, reason string) bool {
	var recs []moveRecord
	returned := false
	for i := mark; i < len(c.log); i++ {
		o := c.log[i]
		if o.prev.state != tsEvicted && o.prev.state != tsPending {
			continue
		}
		slot := &c.jobs[o.job].tasks[o.task]
		r := moveRecord{job: int(o.job), task: int(o.task), node: int(slot.node), devs: slot.devs}
		if o.prev.state == tsEvicted && slot.oldNode == slot.node {
			task := &c.jobs[o.job].job.Tasks[o.task]
			r.stays = task.GPU >= OneGPU || task.GPU == 0 || slices.Equal(slot.devs, slot.oldDevs)
		}
		returned = returned || r.stays
		recs = append(recs, r)
	}
	if !returned {
		return true
	}
	c.rollback(mark)
	for _, r := range recs {
		if !r.stays && c.jobs[r.job].tasks[r.task].state == tsRunning {
			c.evict(r.job, r.task, Consolidate, reason)
		}
	}
	for _, r := range recs {
		if r.stays {
			continue
		}
		task := &c.jobs[r.job].job.Tasks[r.task]
		devs := r.devs
		if !c.devsFitSoon(r.node, task, devs) {
			devs = c.pickOn(r.node, task)
		}
		if devs == nil {
			c.rollback(mark)
			return false
		}
		c.place(r.job, r.task, r.node, devs, true, Consolidate)
	}
	return true
}

// devsFitSoon reports whether task fits on node n's devices devs once
// what is being freed there is free.
func (c *cycle) devsFitSoon(n int, task *Task, devs []int) bool {
	ns := &c.nodes[n]
	if !ns.fitsHost(task, freeSoon) {
		return false
	}
	classes := c.matchingClasses(task)
	for _, p := range devs {
		d := &ns.devs[p]
		if !classIn(d.class, classes) {
			return false
		}
		if task.GPU >= OneGPU && d.used != 0 || task.GPU < OneGPU && OneGPU-d.used < task.GPU {
			return false
		}
	}
	return true
}

// pickOn chooses devices for task on node n using capacity being freed.
func (c *cycle) pickOn(n int, task *Task) []int {
	return c.pickAny(n, task, c.matchingClasses(task), freeSoon)
}

// findRanked chooses a node for task t of job j the way KAI orders nodes
// for a pipeline-only placement: nodes where it fits on idle capacity
// first (plugins/nodeavailability), then the placement strategy over
// capacity that is idle or being freed (plugins/nodeplacement counts
// idle + releasing), then, on a tie, the node the task ran on, so a
// victim whose node still suits it stays. Among nodes with nothing being
// freed the index's first fit is the strategy's choice; nodes with
// capacity being freed are ranked one by one. dom is already narrowed to
// the job's nodes.
func (c *cycle) findRanked(j, t int, dom bitset) (int, []int, bool) {
	task := &c.jobs[j].job.Tasks[t]
	old := int(c.jobs[j].tasks[t].oldNode)
	classes := c.matchingClasses(task)
	sc := c.gpu
	if task.GPU == 0 {
		sc = c.cpu
	}
	best, bestDevs := c.findNode(task, c.withoutReleasing(dom), freeNow)
	bestNow := best >= 0
	var bestRoom int64
	if best >= 0 {
		bestRoom = c.releasingRoom(best, task, classes)
	}
	for n := c.idx.rel.next(0, dom); n >= 0; n = c.idx.rel.next(n+1, dom) {
		room := c.releasingRoom(n, task, classes)
		if room < task.GPU || task.GPU == 0 && room < task.CPU {
			continue // cannot hold it even once everything leaves
		}
		devs, now := c.pickAny(n, task, classes, freeNow), true
		if devs == nil {
			devs, now = c.pickAny(n, task, classes, freeSoon), false
		}
		if devs == nil {
			continue
		}
		better := best < 0 || now && !bestNow
		if !better && now == bestNow {
			better = sc.before(room, bestRoom) || !sc.before(bestRoom, room) && n == old
		}
		if better {
			best, bestDevs, bestRoom, bestNow = n, devs, room, now
		}
	}
	return best, bestDevs, best >= 0 && !bestNow
}

// withoutReleasing narrows dom (nil: every node) to the nodes with
// nothing being freed.
func (c *cycle) withoutReleasing(dom bitset) bitset {
	out := make(bitset, len(c.idx.rel))
	for w := range out {
		out[w] = ^c.idx.rel[w]
		if dom != nil {
			out[w] &= dom[w]
		}
	}
	return out
}

// pickAny chooses devices for task on node n in mode m from any of its
// device classes, or nil when it does not fit.
func (c *cycle) pickAny(n int, task *Task, classes []int, m mode) []int {
	if !c.nodes[n].fitsHost(task, m) {
		return nil
	}
	if task.GPU == 0 {
		return []int{}
	}
	for _, cl := range classes {
		if devs := c.pickDevices(n, task, cl, m); devs != nil {
			return devs
		}
	}
	return nil
}
