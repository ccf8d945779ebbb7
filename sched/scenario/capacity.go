package scenario

import (
	"slices"

	"gpud.dev/gpud/sched"
)

// capacity is what each node's running tasks hold between two cycles,
// so pipelined tasks bind only where their capacity is really free.
type capacity struct {
	nodes map[string]*nodeHeld
}

type nodeHeld struct {
	node     *sched.Node
	cpu, mem int64
	devs     map[int]*devUse // by device index
}

// newCapacity counts the running tasks of the snapshot: releasing tasks
// have finished by now and hold nothing.
func newCapacity(snap *sched.Snapshot) *capacity {
	c := &capacity{nodes: map[string]*nodeHeld{}}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		c.nodes[n.Name] = &nodeHeld{node: n, devs: map[int]*devUse{}}
	}
	for j := range snap.Jobs {
		for t := range snap.Jobs[j].Tasks {
			if task := &snap.Jobs[j].Tasks[t]; task.Status == sched.Running {
				c.take(task)
			}
		}
	}
	return c
}

// take counts a running task's request on its node and devices.
func (c *capacity) take(t *sched.Task) {
	n := c.nodes[t.Node]
	if n == nil {
		return
	}
	n.cpu += t.CPU
	n.mem += t.Memory
	for _, d := range t.Devices {
		u := n.devs[d]
		if u == nil {
			u = &devUse{}
			n.devs[d] = u
		}
		if t.GPU < sched.OneGPU && t.MIG == "" {
			u.frac += t.GPU
		} else {
			u.whole = true
		}
	}
}

// holds reports whether every one of job j's pipelined placements fits
// its node and devices now, counting the ones before it.
func (c *capacity) holds(snap *sched.Snapshot, j int, ps []sched.Placement) bool {
	type devKey struct {
		node string
		dev  int
	}
	extraDev := map[devKey]devUse{}
	extraCPU, extraMem := map[string]int64{}, map[string]int64{}
	for _, p := range ps {
		t := &snap.Jobs[j].Tasks[p.Task]
		n := c.nodes[p.Node]
		if n == nil {
			return false
		}
		extraCPU[p.Node] += t.CPU
		extraMem[p.Node] += t.Memory
		if n.cpu+extraCPU[p.Node] > n.node.CPU || n.mem+extraMem[p.Node] > n.node.Memory {
			return false
		}
		for _, d := range p.Devices {
			k := devKey{p.Node, d}
			var held devUse
			if u := n.devs[d]; u != nil {
				held = *u
			}
			e := extraDev[k]
			whole := held.whole || e.whole
			frac := held.frac + e.frac
			if t.GPU < sched.OneGPU && t.MIG == "" {
				if whole || frac+t.GPU > sched.OneGPU {
					return false
				}
				e.frac += t.GPU
			} else {
				if whole || frac > 0 {
					return false
				}
				e.whole = true
			}
			extraDev[k] = e
		}
	}
	return true
}

// sortedInts returns a map's keys in order, for a deterministic walk.
func sortedInts[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
