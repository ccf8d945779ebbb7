package sched

import (
	"slices"
	"strings"
	"time"
)

// taskState is where a task stands during a cycle.
type taskState uint8

const (
	tsPending   taskState = iota
	tsRunning             // running before the cycle and kept
	tsReleasing           // terminating; holds capacity that counts as being freed
	tsBound               // placed this cycle on free capacity
	tsPipelined           // placed this cycle on capacity still being freed
	tsEvicted             // chosen as a victim; holds capacity until it stops
	tsDone                // not part of the cycle (finished)
)

// holds reports whether the task counts toward its queue's allocation.
func (s taskState) holds() bool { return s == tsRunning || s == tsBound || s == tsPipelined }

// taskSlot is one task during a cycle: where it is and where it was.
type taskSlot struct {
	state  taskState
	node   int32 // -1: none
	devs   []int // positions in nodeState.devs
	action Action
	// A victim keeps holding capacity on its old node until it stops.
	oldNode int32
	oldDevs []int
	reason  string
}

// jobSlot is one job during a cycle: its queue, order, tasks and why it
// waits (daemon's stored job record and scenario.JobState are other things).
type jobSlot struct {
	job    *Job
	queue  int
	order  int
	tasks  []taskSlot
	active int // tasks in holds() states
	minM   int
	// reason is set by the first action that failed to place the job.
	reason        string
	capacityBound bool // the reason is capacity, not a quota
	// noReclaim says why the job may not take capacity back from other
	// queues (its queue is at its fair share); only the reason reads it.
	noReclaim string
	tried     bool
	// eligible is the nodes Job.Nodes selects; nil: every node.
	eligible bitset
}

func (j *jobSlot) request(tasks []int) Resources {
	var r Resources
	for _, t := range tasks {
		r = r.Add(j.job.Tasks[t].Request())
	}
	return r
}

// devState is one device during a cycle. used is held by running, bound
// and pipelined tasks; rel by releasing tasks and victims.
type devState struct {
	class     int
	index     int
	used, rel int64
	frac      int // fractional tasks on it, in used or rel
}

type nodeState struct {
	node            *Node
	schedulable     bool
	usedCPU, relCPU int64
	usedMem, relMem int64
	devs            []devState
	// classes lists the device classes on the node and how many of each
	// are wholly free right now.
	classes []nodeClass
	rel     int64 // sum of rel over everything: nonzero means capacity is being freed
}

type nodeClass struct {
	class, total, free int
	partial            bool // a shared device of this class has room
}

// devClass is one distinct device type in the cluster.
type devClass struct {
	name       string
	memory     int64
	mig        string
	maxPerNode int
}

type queueState struct {
	q                      *Queue
	parent                 int
	children               []int
	path                   []int // itself, then its ancestors up to the top
	quota, limit           Resources
	weight                 [NumResources]float64
	alloc, npAlloc         Resources
	request                Resources
	fair                   Resources
	preemptMin, reclaimMin time.Duration
	jobs                   []int // leaf only: its jobs by priority, then age
}

// op is one reversible change, kept so a failed gang or victim search
// can be rolled back.
type op struct {
	job, task int32
	prev      taskSlot
}

// cycle is the working state of one Schedule call.
type cycle struct {
	snap   *Snapshot
	policy Policy
	// gpu and cpu score candidates by the policy's strategies.
	gpu, cpu scorer
	nodes    []nodeState
	nodeByID map[string]int
	classes  []devClass
	idx      nodeIndex
	queues   []queueState
	queueBy  map[string]int
	jobs     []jobSlot
	topo     map[string]*topologyIndex
	log      []op
	// epoch changes whenever capacity is freed, so cached failures expire.
	epoch      int
	failByKind map[string]failure
	matchCache map[string][]int
	// withPending lists the jobs that had a pending task when the first
	// job order was built (order.go); no job gains one later in a cycle.
	withPending []int32
}

type failure struct {
	epoch  int
	reason string
}

func newCycle(s *Snapshot) *cycle {
	c := &cycle{
		snap:       s,
		policy:     s.Policy,
		nodeByID:   make(map[string]int, len(s.Nodes)),
		queueBy:    make(map[string]int, len(s.Queues)),
		topo:       map[string]*topologyIndex{},
		failByKind: map[string]failure{},
		matchCache: map[string][]int{},
	}
	c.gpu, c.cpu = scorerFor(c.policy.GPU), scorerFor(c.policy.CPU)
	if c.policy.Actions == nil {
		c.policy.Actions = AllActions()
	}
	c.buildNodes()
	c.buildQueues()
	c.buildJobs()
	c.idx = newNodeIndex(c)
	return c
}

func (c *cycle) buildNodes() {
	classOf := map[devClass]int{}
	c.nodes = make([]nodeState, len(c.snap.Nodes))
	for i := range c.snap.Nodes {
		n := &c.snap.Nodes[i]
		c.nodeByID[n.Name] = i
		ns := &c.nodes[i]
		ns.node = n
		ns.schedulable = !n.Unschedulable
		ns.devs = make([]devState, len(n.Devices))
		for d, dev := range n.Devices {
			key := devClass{name: dev.Name, memory: dev.Memory, mig: dev.MIG}
			cl, ok := classOf[key]
			if !ok {
				cl = len(c.classes)
				classOf[key] = cl
				c.classes = append(c.classes, key)
			}
			ns.devs[d] = devState{class: cl, index: dev.Index}
			k := slices.IndexFunc(ns.classes, func(x nodeClass) bool { return x.class == cl })
			if k < 0 {
				ns.classes = append(ns.classes, nodeClass{class: cl})
				k = len(ns.classes) - 1
			}
			ns.classes[k].total++
			ns.classes[k].free++
		}
		for _, nc := range ns.classes {
			c.classes[nc.class].maxPerNode = max(c.classes[nc.class].maxPerNode, nc.total)
		}
	}
}

// devPos maps a device Index to its position on the node, or -1.
func (n *nodeState) devPos(index int) int {
	if index >= 0 && index < len(n.devs) && n.devs[index].index == index {
		return index
	}
	for p := range n.devs {
		if n.devs[p].index == index {
			return p
		}
	}
	return -1
}

func (c *cycle) buildJobs() {
	c.jobs = make([]jobSlot, len(c.snap.Jobs))
	bySelector := map[string]bitset{} // jobs of one project share one set
	for i := range c.snap.Jobs {
		j := &c.snap.Jobs[i]
		js := &c.jobs[i]
		js.job, js.order = j, i
		if sel := j.Nodes; !sel.IsZero() {
			key := selectorKey(sel)
			set, ok := bySelector[key]
			if !ok {
				set = newBitset(len(c.nodes))
				for n := range c.nodes {
					if sel.selects(c.nodes[n].node) {
						set.set(n)
					}
				}
				bySelector[key] = set
			}
			js.eligible = set
		}
		js.queue = -1
		if q, ok := c.queueBy[j.Queue]; ok {
			js.queue = q
		}
		js.minM = j.MinMembers
		if js.minM <= 0 || js.minM > len(j.Tasks) {
			js.minM = len(j.Tasks)
		}
		js.tasks = make([]taskSlot, len(j.Tasks))
		for t := range j.Tasks {
			task := &j.Tasks[t]
			slot := &js.tasks[t]
			slot.node, slot.oldNode = -1, -1
			n, ok := c.nodeByID[task.Node]
			if task.Status == Pending || !ok {
				continue
			}
			ns := &c.nodes[n]
			devs := make([]int, 0, len(task.Devices))
			for _, d := range task.Devices {
				if p := ns.devPos(d); p >= 0 {
					devs = append(devs, p)
				}
			}
			slot.node, slot.devs = int32(n), devs
			if task.Status == Releasing {
				slot.state = tsReleasing
				c.hold(n, task, devs, false)
				c.toRel(n, task, devs)
				continue
			}
			slot.state = tsRunning
			c.hold(n, task, devs, false)
			js.active++
			if js.queue >= 0 {
				c.addAlloc(js, task.Request(), 1)
			}
		}
		if js.queue >= 0 {
			q := &c.queues[js.queue]
			q.jobs = append(q.jobs, i)
		}
	}
	for qi := range c.queues {
		q := &c.queues[qi]
		slices.SortStableFunc(q.jobs, func(a, b int) int {
			return c.snap.Jobs[b].Priority - c.snap.Jobs[a].Priority
		})
	}
}

// perDevice splits a task's GPU request over its devices.
func perDevice(t *Task, n int) int64 {
	if n == 0 {
		return 0
	}
	if t.GPU < OneGPU {
		return t.GPU
	}
	return OneGPU
}

// hold adds a task's resources to a node as used.
func (c *cycle) hold(n int, t *Task, devs []int, _ bool) {
	ns := &c.nodes[n]
	ns.usedCPU += t.CPU
	ns.usedMem += t.Memory
	per := perDevice(t, len(devs))
	for _, p := range devs {
		d := &ns.devs[p]
		d.used += per
		if t.GPU < OneGPU {
			d.frac++
		}
	}
}

// unhold removes a task's used resources from a node.
func (c *cycle) unhold(n int, t *Task, devs []int) {
	ns := &c.nodes[n]
	ns.usedCPU -= t.CPU
	ns.usedMem -= t.Memory
	per := perDevice(t, len(devs))
	for _, p := range devs {
		d := &ns.devs[p]
		d.used -= per
		if t.GPU < OneGPU {
			d.frac--
		}
	}
}

// toRel turns a task's used resources on a node into capacity being freed.
func (c *cycle) toRel(n int, t *Task, devs []int) {
	ns := &c.nodes[n]
	ns.usedCPU -= t.CPU
	ns.relCPU += t.CPU
	ns.usedMem -= t.Memory
	ns.relMem += t.Memory
	per := perDevice(t, len(devs))
	for _, p := range devs {
		ns.devs[p].used -= per
		ns.devs[p].rel += per
	}
	ns.rel += t.CPU + t.Memory + per*int64(len(devs))
}

// fromRel undoes toRel.
func (c *cycle) fromRel(n int, t *Task, devs []int) {
	ns := &c.nodes[n]
	ns.usedCPU += t.CPU
	ns.relCPU -= t.CPU
	ns.usedMem += t.Memory
	ns.relMem -= t.Memory
	per := perDevice(t, len(devs))
	for _, p := range devs {
		ns.devs[p].used += per
		ns.devs[p].rel -= per
	}
	ns.rel -= t.CPU + t.Memory + per*int64(len(devs))
}

// addAlloc adds (sign 1) or removes (sign -1) a request from the job's
// queue and every ancestor.
func (c *cycle) addAlloc(js *jobSlot, r Resources, sign int64) {
	for _, q := range c.queues[js.queue].path {
		qs := &c.queues[q]
		for i := range r {
			qs.alloc[i] += sign * r[i]
			if !js.job.Preemptible {
				qs.npAlloc[i] += sign * r[i]
			}
		}
	}
}

// place binds task t of job j to node n; pipelined marks capacity still
// being freed.
func (c *cycle) place(j, t, n int, devs []int, pipelined bool, a Action) {
	js := &c.jobs[j]
	slot := &js.tasks[t]
	c.log = append(c.log, op{job: int32(j), task: int32(t), prev: *slot})
	task := &js.job.Tasks[t]
	slot.node, slot.devs, slot.action = int32(n), devs, a
	slot.state = tsBound
	if pipelined {
		slot.state = tsPipelined
	}
	c.hold(n, task, devs, pipelined)
	js.active++
	c.addAlloc(js, task.Request(), 1)
	c.idx.update(c, n)
}

// evict makes task t of job j a victim: it keeps holding its capacity,
// now counted as being freed, and leaves its queue's allocation.
func (c *cycle) evict(j, t int, a Action, reason string) {
	js := &c.jobs[j]
	slot := &js.tasks[t]
	c.log = append(c.log, op{job: int32(j), task: int32(t), prev: *slot})
	task := &js.job.Tasks[t]
	n := int(slot.node)
	c.toRel(n, task, slot.devs)
	slot.oldNode, slot.oldDevs = slot.node, slot.devs
	slot.node, slot.devs = -1, nil
	slot.state, slot.action, slot.reason = tsEvicted, a, reason
	js.active--
	c.addAlloc(js, task.Request(), -1)
	c.epoch++
	c.idx.update(c, n)
}

// rollback undoes every change logged after mark.
func (c *cycle) rollback(mark int) {
	if mark < len(c.log) {
		c.epoch++
	}
	for i := len(c.log) - 1; i >= mark; i-- {
		o := c.log[i]
		js := &c.jobs[o.job]
		slot := &js.tasks[o.task]
		task := &js.job.Tasks[o.task]
		switch slot.state {
		case tsBound, tsPipelined:
			n := int(slot.node)
			c.unhold(n, task, slot.devs)
			js.active--
			c.addAlloc(js, task.Request(), -1)
			c.idx.update(c, n)
		case tsEvicted:
			n := int(slot.oldNode)
			c.fromRel(n, task, slot.oldDevs)
			js.active++
			c.addAlloc(js, task.Request(), 1)
			c.idx.update(c, n)
		}
		*slot = o.prev
	}
	c.log = c.log[:mark]
}

// selectorKey identifies a selector (for sharing its node set and for the
// failure cache: jobs that may use different nodes fail differently).
func selectorKey(s NodeSelector) string {
	if s.IsZero() {
		return ""
	}
	k := s.Key + "=" + strings.Join(s.Values, "\x00")
	for _, a := range s.And {
		k += "\x01" + selectorKey(a)
	}
	return k
}

// within narrows dom (nil: every node) to the nodes job j may use.
func (c *cycle) within(j int, dom bitset) bitset {
	el := c.jobs[j].eligible
	switch {
	case el == nil:
		return dom
	case dom == nil:
		return el
	}
	out := make(bitset, len(dom))
	for w := range out {
		out[w] = dom[w] & el[w]
	}
	return out
}
