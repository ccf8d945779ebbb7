package sched

import (
	"strconv"
	"strings"
)

// mode says which capacity a placement may use.
type mode uint8

const (
	freeNow  mode = iota // only capacity free right now
	freeSoon             // also capacity held by releasing tasks and victims
)

// matchingClasses returns the device classes a task can use, cached per
// task shape: the feasibility of a device type is decided once per cycle.
func (c *cycle) matchingClasses(t *Task) []int {
	if t.GPU == 0 {
		return nil
	}
	key := t.GPUName + "\x00" + t.MIG + "\x00" + strconv.FormatInt(t.GPUMemory, 10) + "\x00" + strconv.FormatInt(t.GPUMemoryMax, 10)
	if m, ok := c.matchCache[key]; ok {
		return m
	}
	m := []int{}
	for i, cl := range c.classes {
		if cl.mig != t.MIG || cl.memory < t.GPUMemory || t.GPUMemoryMax > 0 && cl.memory > t.GPUMemoryMax {
			continue
		}
		if t.GPUName != "" && !nameMatches(cl.name, t.GPUName) {
			continue
		}
		m = append(m, i)
	}
	c.matchCache[key] = m
	return m
}

// nameMatches reports whether a device model is one of names (one model,
// or several separated by commas), ignoring case.
func nameMatches(model, names string) bool {
	for names != "" {
		name, rest, _ := strings.Cut(names, ",")
		if equalFold(model, name) {
			return true
		}
		names = rest
	}
	return false
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// fitsHost reports whether the node's CPU and memory take the task.
func (n *nodeState) fitsHost(t *Task, m mode) bool {
	cpu, mem := n.node.CPU-n.usedCPU, n.node.Memory-n.usedMem
	if m == freeNow {
		cpu -= n.relCPU
		mem -= n.relMem
	}
	return t.CPU <= cpu && t.Memory <= mem
}

// devFree is the device capacity a placement in mode m may use.
func (d *devState) free(m mode) int64 {
	if m == freeNow {
		return OneGPU - d.used - d.rel
	}
	return OneGPU - d.used
}

// pickDevices chooses devices of one class on node n for the task, or nil.
// Whole-GPU tasks take wholly free devices, lowest index first, and never
// a device shared by fractional tasks; fractional tasks pack onto the
// fullest shared device that has room (spread: the emptiest device).
func (c *cycle) pickDevices(n int, t *Task, class int, m mode) []int {
	ns := &c.nodes[n]
	if t.GPU >= OneGPU {
		want := int(t.GPU / OneGPU)
		devs := make([]int, 0, want)
		for p := range ns.devs {
			d := &ns.devs[p]
			if d.class == class && d.free(m) == OneGPU && (m == freeNow || d.frac == 0 || d.used == 0) {
				devs = append(devs, p)
				if len(devs) == want {
					return devs
				}
			}
		}
		return nil
	}
	best, bestFree := -1, int64(0)
	for p := range ns.devs {
		d := &ns.devs[p]
		f := d.free(m)
		if d.class != class || f < t.GPU {
			continue
		}
		if best < 0 || c.gpu.betterDevice(f, bestFree, d.frac > 0, ns.devs[best].frac > 0) {
			best, bestFree = p, f
		}
	}
	if best < 0 {
		return nil
	}
	return []int{best}
}

// findNode chooses a node and devices for task t within domain dom (nil:
// anywhere): the device classes the task can use (feasibility, cached per
// shape), then the free-capacity buckets in the GPU scorer's order, so the
// first node that fits is the strategy's choice.
func (c *cycle) findNode(t *Task, dom bitset, m mode) (int, []int) {
	if m == freeSoon {
		return c.findReleasing(t, dom)
	}
	if t.GPU == 0 {
		return c.findHostOnly(t, dom, c.idx.all, m)
	}
	classes := c.matchingClasses(t)
	want := 1
	if t.GPU >= OneGPU {
		want = int(t.GPU / OneGPU)
	}
	fractional := t.GPU < OneGPU
	if fractional && c.gpu.partialFirst() {
		if n, devs := c.scanPartial(t, classes, dom, m); n >= 0 {
			return n, devs
		}
	}
	top := 0
	for _, cl := range classes {
		top = max(top, c.classes[cl].maxPerNode)
	}
	for step := 0; step <= top-want; step++ {
		k := c.gpu.bucket(step, want, top)
		for _, cl := range classes {
			b := c.idx.classes[cl].buckets
			if k >= len(b) {
				continue
			}
			if n, devs := c.scanBucket(t, cl, b[k], dom, m); n >= 0 {
				return n, devs
			}
		}
	}
	if fractional && !c.gpu.partialFirst() {
		return c.scanPartial(t, classes, dom, m)
	}
	return -1, nil
}

// scanPartial looks for a fractional task's room on devices that other
// fractional tasks already share.
func (c *cycle) scanPartial(t *Task, classes []int, dom bitset, m mode) (int, []int) {
	for _, cl := range classes {
		if n, devs := c.scanBucket(t, cl, c.idx.classes[cl].partial, dom, m); n >= 0 {
			return n, devs
		}
	}
	return -1, nil
}

func (c *cycle) scanBucket(t *Task, class int, b, dom bitset, m mode) (int, []int) {
	for n := b.next(0, dom); n >= 0; n = b.next(n+1, dom) {
		ns := &c.nodes[n]
		if !ns.fitsHost(t, m) {
			continue
		}
		if devs := c.pickDevices(n, t, class, m); devs != nil {
			return n, devs
		}
	}
	return -1, nil
}

// findHostOnly places a task that needs no GPU by the CPU policy among
// the nodes in set.
func (c *cycle) findHostOnly(t *Task, dom, set bitset, m mode) (int, []int) {
	best := -1
	var bestFree int64
	for n := set.next(0, dom); n >= 0; n = set.next(n+1, dom) {
		ns := &c.nodes[n]
		if !ns.fitsHost(t, m) {
			continue
		}
		f := ns.node.CPU - ns.usedCPU - ns.relCPU
		if best < 0 || c.cpu.before(f, bestFree) {
			best, bestFree = n, f
		}
	}
	return best, []int{}
}

// findReleasing places a task onto nodes whose capacity is being freed:
// among those where it fits, the scorer's choice by the capacity that is
// free or being freed (KAI's nodeplacement ranks pipelining candidates by
// idle + releasing; see pipeline.go).
func (c *cycle) findReleasing(t *Task, dom bitset) (int, []int) {
	if t.GPU == 0 {
		return c.findHostOnly(t, dom, c.idx.rel, freeSoon)
	}
	classes := c.matchingClasses(t)
	best, bestDevs := -1, []int(nil)
	var bestRoom int64
	for n := c.idx.rel.next(0, dom); n >= 0; n = c.idx.rel.next(n+1, dom) {
		ns := &c.nodes[n]
		if !ns.fitsHost(t, freeSoon) {
			continue
		}
		for _, cl := range classes {
			if ns.classPos(cl) < 0 {
				continue
			}
			if devs := c.pickDevices(n, t, cl, freeSoon); devs != nil {
				if room := c.releasingRoom(n, t, classes); best < 0 || c.gpu.before(room, bestRoom) {
					best, bestDevs, bestRoom = n, devs, room
				}
				break
			}
		}
	}
	return best, bestDevs
}

// placeTasks places the given tasks of job j inside dom, all or none,
// and only on the nodes the job may use (Job.Nodes).
// It returns how many it placed before failing (all of them on success).
func (c *cycle) placeTasks(j int, tasks []int, dom bitset, allow mode, a Action) (int, bool) {
	dom = c.within(j, dom)
	mark := len(c.log)
	js := &c.jobs[j]
	for i, t := range tasks {
		task := &js.job.Tasks[t]
		n, devs, pipelined := -1, []int(nil), false
		if allow == freeSoon && task.GPU > 0 && task.GPU < OneGPU && c.gpu.partialFirst() {
			n, devs, pipelined = c.findSharedReleasing(task, dom)
		}
		if n < 0 && a == Consolidate && allow == freeSoon {
			n, devs, pipelined = c.findRanked(j, t, dom)
		} else if n < 0 {
			n, devs = c.findNode(task, dom, freeNow)
		}
		if n < 0 && allow == freeSoon && a != Consolidate {
			n, devs = c.findNode(task, dom, freeSoon)
			pipelined = true
		}
		if n < 0 {
			c.rollback(mark)
			return i, false
		}
		c.place(j, t, n, devs, pipelined, a)
	}
	return len(tasks), true
}

// placeGang places tasks of job j all or none, honouring the job's
// topology: the preferred level's tightest fitting domain first, then the
// required level's. On failure it returns the most tasks any allowed
// domain could hold, for the reason.
func (c *cycle) placeGang(j int, tasks []int, allow mode, a Action) (best int, ok bool) {
	mark := len(c.log)
	defer func() {
		if ok {
			c.pipelineGang(j, mark)
		}
	}()
	tc := c.jobs[j].job.Topology
	if tc.Name == "" || (tc.Required == "" && tc.Preferred == "") {
		return c.placeTasks(j, tasks, nil, allow, a)
	}
	for _, level := range []string{tc.Preferred, tc.Required} {
		if level == "" {
			continue
		}
		for _, dom := range c.domainsByTightness(j, tasks, tc.Name, level) {
			n, ok := c.placeTasks(j, tasks, dom.nodes, allow, a)
			if ok {
				return n, true
			}
			best = max(best, n)
		}
	}
	if tc.Required == "" {
		return c.placeTasks(j, tasks, nil, allow, a)
	}
	return best, false
}
