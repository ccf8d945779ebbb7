package sched

// Pipelining: a task placed on capacity that is still being freed
// (releasing tasks, or victims evicted this cycle) is pipelined: it binds
// once the capacity is free. KAI Scheduler's rules, each with its source:
//
//   - A node where the task fits on idle capacity goes before one where it
//     would wait for releasing capacity (plugins/nodeavailability:
//     nodeOrderFn scores idle fit above any bin-pack or spread score), so
//     each task tries free capacity first (placeTasks).
//   - Among nodes where it must wait, the placement strategy still orders
//     them by capacity that is idle or releasing (plugins/nodeplacement:
//     nodeResourcePack counts NonAllocatedResource = idle + releasing),
//     so findReleasing ranks them by the scorer.
//   - A gang starts together: when any member is pipelined and the members
//     bound on free capacity (running ones included) do not reach its
//     minimum, every member placed with it is pipelined too
//     (actions/allocate: attemptToAllocateJob with
//     PodGroupInfo.ShouldPipelineJob and Statement.ConvertAllAllocatedToPipelined).
//   - Under bin-pack, a fraction joins a shared device that has room once
//     its releasing fractions leave, before taking a wholly free device
//     (plugins/gpusharingorder scores such a node above idle fit;
//     gpu_sharing.GetNodePreferableGpuForSharing marks it releasing, so
//     the task is pipelined).
//   - An action that evicts (consolidate) places pipeline-only: every task
//     it places is pipelined, even onto idle capacity
//     (common.TryToVirtuallyAllocatePreemptorAndGetVictims calls
//     AllocateJob with isPipelineOnly).

// pipelineGang applies the gang rule to job j for the placements logged
// since mark: if one of them is pipelined and the members bound on free
// capacity do not reach the job's minimum, the others become pipelined
// too. It only relabels placements (both hold the same capacity), so a
// later rollback past mark undoes them as before.
func (c *cycle) pipelineGang(j, mark int) {
	js := &c.jobs[j]
	some := false
	for i := mark; i < len(c.log); i++ {
		if o := c.log[i]; int(o.job) == j && js.tasks[o.task].state == tsPipelined {
			some = true
			break
		}
	}
	if !some {
		return
	}
	bound := 0
	for t := range js.tasks {
		if s := js.tasks[t].state; s == tsRunning || s == tsBound {
			bound++
		}
	}
	if bound >= js.minM {
		return
	}
	c.pipelineAll(j, mark)
}

// pipelineAll marks every placement of job j logged since mark pipelined.
func (c *cycle) pipelineAll(j, mark int) {
	js := &c.jobs[j]
	for i := mark; i < len(c.log); i++ {
		if o := c.log[i]; int(o.job) == j && js.tasks[o.task].state == tsBound {
			js.tasks[o.task].state = tsPipelined
		}
	}
}

// findSharedReleasing finds, for a fractional task under bin-pack, a
// device other fractions share that has room now (bound) or once its
// releasing fractions leave (pipelined), fullest first. A device whose
// every fraction is leaving does not count as shared.
func (c *cycle) findSharedReleasing(t *Task, dom bitset) (n int, devs []int, pipelined bool) {
	classes := c.matchingClasses(t)
	if n, devs := c.scanPartial(t, classes, dom, freeNow); n >= 0 {
		return n, devs, false
	}
	best, bestDev := -1, -1
	var bestFree int64
	for m := c.idx.rel.next(0, dom); m >= 0; m = c.idx.rel.next(m+1, dom) {
		ns := &c.nodes[m]
		if !ns.fitsHost(t, freeSoon) {
			continue
		}
		for p := range ns.devs {
			d := &ns.devs[p]
			if d.frac == 0 || d.used == 0 || d.rel == 0 || OneGPU-d.used < t.GPU || !classIn(d.class, classes) {
				continue
			}
			if f := OneGPU - d.used; best < 0 || f < bestFree {
				best, bestDev, bestFree = m, p, f
			}
		}
	}
	if best < 0 {
		return -1, nil, false
	}
	return best, []int{bestDev}, true
}

func classIn(cl int, classes []int) bool {
	for _, x := range classes {
		if x == cl {
			return true
		}
	}
	return false
}

// releasingRoom is the capacity of node n a task could use once what is
// being freed is free: devices of the task's classes, or CPU for a task
// without GPUs. The scorer ranks pipelining candidates by it.
func (c *cycle) releasingRoom(n int, t *Task, classes []int) int64 {
	ns := &c.nodes[n]
	if t.GPU == 0 {
		return ns.node.CPU - ns.usedCPU
	}
	var room int64
	for p := range ns.devs {
		if d := &ns.devs[p]; classIn(d.class, classes) {
			room += OneGPU - d.used
		}
	}
	return room
}
