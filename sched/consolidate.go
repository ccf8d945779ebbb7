package sched

// consolidateNodesPerTask bounds how many nodes consolidation tries to
// clear for one task, so a hopeless job costs little.
const consolidateNodesPerTask = 32

// consolidate defragments: for a job that failed only for lack of capacity
// while enough is free in total, it moves preemptible single-task jobs off
// a node to make room, and keeps the moves only if every moved task is
// placed again elsewhere and the whole gang fits.
func (c *cycle) consolidate() {
	clear(c.failByKind)
	var tasksOn [][]int32 // node -> movable jobs running there
	for _, j := range c.unplacedJobs() {
		toMin, _ := c.pendingTasks(j)
		js := &c.jobs[j]
		req := js.request(toMin)
		if c.gate(j, req) != "" {
			continue
		}
		// Moving tasks never adds free capacity, so a shape that lacks it
		// in total lacks it for the rest of the action.
		key := c.shapeKey(j, toMin)
		if _, short := c.failByKind[key]; short {
			continue
		}
		if !c.freeInTotal(&js.job.Tasks[toMin[0]], req) {
			c.failByKind[key] = failure{}
			continue
		}
		if js.job.Topology.Required != "" {
			continue // moving tasks across domains is not attempted
		}
		if tasksOn == nil {
			tasksOn = c.movableByNode()
		}
		mark := len(c.log)
		ok := true
		for _, t := range toMin {
			if !c.placeOrMakeRoom(j, t, tasksOn) {
				ok = false
				break
			}
		}
		if !ok {
			c.rollback(mark)
			continue
		}
		js.reason = ""
	}
}

// freeInTotal reports whether the cluster has, summed over nodes, enough
// free capacity of the task's device type for the request.
func (c *cycle) freeInTotal(t *Task, req Resources) bool {
	classes := c.matchingClasses(t)
	var gpu, cpu int64
	for n := c.idx.all.next(0, nil); n >= 0; n = c.idx.all.next(n+1, nil) {
		ns := &c.nodes[n]
		cpu += ns.node.CPU - ns.usedCPU - ns.relCPU
		for p := range ns.devs {
			d := &ns.devs[p]
			for _, cl := range classes {
				if d.class == cl {
					gpu += d.free(freeNow)
				}
			}
		}
	}
	return gpu >= req[GPU] && cpu >= req[CPU]
}

// movableByNode lists, per node, the preemptible single-task jobs running
// there: the tasks consolidation may move.
func (c *cycle) movableByNode() [][]int32 {
	out := make([][]int32, len(c.nodes))
	for v := range c.jobs {
		js := &c.jobs[v]
		if !js.job.Preemptible || len(js.tasks) != 1 || js.tasks[0].state != tsRunning || js.job.Topology.Required != "" {
			continue
		}
		n := js.tasks[0].node
		out[n] = append(out[n], int32(v))
	}
	return out
}

// placeOrMakeRoom places task t of job j, clearing movable tasks off one
// node if nothing is free for it.
func (c *cycle) placeOrMakeRoom(j, t int, tasksOn [][]int32) bool {
	task := &c.jobs[j].job.Tasks[t]
	if n, devs := c.findNode(task, c.within(j, nil), freeNow); n >= 0 {
		c.place(j, t, n, devs, false, Consolidate)
		return true
	}
	tried := 0
	el := c.jobs[j].eligible
	for n := range c.nodes {
		if len(tasksOn[n]) == 0 || !c.nodes[n].schedulable || (el != nil && !el.has(n)) {
			continue
		}
		if tried++; tried > consolidateNodesPerTask {
			return false
		}
		if c.clearNodeFor(j, t, n, tasksOn[n]) {
			return true
		}
	}
	return false
}

// clearNodeFor moves movable jobs off node n, smallest first, until task t
// of job j fits there; every moved job must land elsewhere right away.
func (c *cycle) clearNodeFor(j, t, n int, movable []int32) bool {
	task := &c.jobs[j].job.Tasks[t]
	mark := len(c.log)
	var moved []int
	reason := "moved to make room for job " + c.jobs[j].job.Name
	for _, v := range sortedBySize(c, movable) {
		if c.jobs[v].tasks[0].state != tsRunning {
			continue
		}
		c.evict(v, 0, Consolidate, reason)
		moved = append(moved, v)
		devs := c.pickOn(n, task)
		if devs == nil {
			continue
		}
		c.place(j, t, n, devs, true, Consolidate)
		for _, m := range moved {
			mt := &c.jobs[m].job.Tasks[0]
			dest, ddevs := c.findNode(mt, c.within(m, nil), freeNow)
			if dest < 0 || dest == n {
				c.rollback(mark)
				return false
			}
			c.place(m, 0, dest, ddevs, true, Consolidate)
		}
		return true
	}
	c.rollback(mark)
	return false
}

// pickOn chooses devices for task on node n using capacity being freed.
func (c *cycle) pickOn(n int, task *Task) []int {
	if !c.nodes[n].fitsHost(task, freeSoon) {
		return nil
	}
	if task.GPU == 0 {
		return []int{}
	}
	for _, cl := range c.matchingClasses(task) {
		if devs := c.pickDevices(n, task, cl, freeSoon); devs != nil {
			return devs
		}
	}
	return nil
}

func sortedBySize(c *cycle, jobs []int32) []int {
	out := make([]int, len(jobs))
	for i, v := range jobs {
		out[i] = int(v)
	}
	for i := 1; i < len(out); i++ {
		for k := i; k > 0 && c.jobs[out[k]].job.Tasks[0].GPU < c.jobs[out[k-1]].job.Tasks[0].GPU; k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out
}
