package sched

import "strconv"

// Schedule runs one scheduling cycle over the snapshot and returns its
// plan. It reads s and never modifies it; the same snapshot always gives
// the same plan.
//
// The whole policy reads top to bottom here: fair share first, then each
// action in the policy's order, then the plan.
func Schedule(s *Snapshot) Plan {
	c := newCycle(s)
	c.computeFairShare()
	for _, a := range c.policy.Actions {
		switch a {
		case Allocate:
			c.allocate()
		case Consolidate:
			c.consolidate()
		case Reclaim:
			c.reclaim()
		case Preempt:
			c.preempt()
		case StaleGang:
			c.evictStaleGangs()
		}
		c.log = c.log[:0] // every action commits what it kept
	}
	c.explainUntried()
	return c.plan()
}

// pendingTasks returns the tasks of job j still waiting, split into those
// needed to reach its minimum members and the elastic rest.
func (c *cycle) pendingTasks(j int) (toMin, extra []int) {
	js := &c.jobs[j]
	short := js.minM - js.active
	if short > 0 && short > c.countPending(j) {
		// Too few tasks left to complete the gang (others are
		// terminating): placing some would leave it partly placed.
		if js.reason == "" {
			js.reason = "gang needs " + strconv.Itoa(js.minM) + " members but only " +
				strconv.Itoa(js.active+c.countPending(j)) + " can run: the others are terminating"
		}
		return nil, nil
	}
	for t := range js.tasks {
		if js.tasks[t].state != tsPending {
			continue
		}
		if short > 0 {
			toMin = append(toMin, t)
			short--
		} else {
			extra = append(extra, t)
		}
	}
	return toMin, extra
}

func (c *cycle) countPending(j int) int {
	n := 0
	for t := range c.jobs[j].tasks {
		if c.jobs[j].tasks[t].state == tsPending {
			n++
		}
	}
	return n
}

// waiting lists the jobs that still miss members they need, in KAI's queue
// and job order from the state as it is now (order.go). Each action calls
// it for itself, so none depends on an earlier action having run.
func (c *cycle) waiting() []int {
	var out []int
	o := c.newJobQueue(func(j int) bool {
		toMin, _ := c.pendingTasks(j)
		return len(toMin) > 0
	})
	for j := o.next(); j >= 0; j = o.next() {
		out = append(out, j)
	}
	return out
}

// plan turns the final task states into a Plan.
func (c *cycle) plan() Plan {
	p := Plan{Pending: map[string]string{}}
	for j := range c.jobs {
		js := &c.jobs[j]
		name := js.job.Name
		unplaced := false
		for t := range js.tasks {
			slot := &js.tasks[t]
			switch slot.state {
			case tsBound, tsPipelined:
				p.Placements = append(p.Placements, Placement{
					Job: name, Task: t, Node: c.nodes[slot.node].node.Name,
					Devices: c.deviceIndices(int(slot.node), slot.devs), Pipelined: slot.state == tsPipelined,
					MPS: js.job.Tasks[t].MPS, Action: slot.action,
				})
			case tsPending:
				unplaced = true
			}
			if slot.oldNode >= 0 {
				p.Evictions = append(p.Evictions, Eviction{
					Job: name, Task: t, Node: c.nodes[slot.oldNode].node.Name, Action: slot.action, Reason: slot.reason,
				})
			}
		}
		if unplaced {
			p.Pending[name] = c.reasonFor(j)
		}
	}
	for q := range c.queues {
		qs := &c.queues[q]
		p.Queues = append(p.Queues, QueueShare{Name: qs.q.Name, FairShare: qs.fair, Allocated: qs.alloc})
	}
	return p
}

func (c *cycle) deviceIndices(n int, devs []int) []int {
	out := make([]int, len(devs))
	for i, p := range devs {
		out[i] = c.nodes[n].devs[p].index
	}
	return out
}
