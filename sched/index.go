package sched

import "math/bits"

// bitset is a set of node positions.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) set(i int)      { b[i>>6] |= 1 << (uint(i) & 63) }
func (b bitset) clear(i int)    { b[i>>6] &^= 1 << (uint(i) & 63) }
func (b bitset) has(i int) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }

// next returns the first member >= from that is also in mask (nil: no
// mask), or -1.
func (b bitset) next(from int, mask bitset) int {
	w := from >> 6
	if w >= len(b) {
		return -1
	}
	cur := b[w] &^ (1<<(uint(from)&63) - 1)
	for {
		if mask != nil {
			cur &= mask[w]
		}
		if cur != 0 {
			return w<<6 + bits.TrailingZeros64(cur)
		}
		w++
		if w >= len(b) {
			return -1
		}
		cur = b[w]
	}
}

// classIndex indexes schedulable nodes for one device class: buckets[k]
// holds the nodes with exactly k wholly free devices of the class, partial
// the nodes with a shared device of the class that still has room.
type classIndex struct {
	buckets []bitset
	partial bitset
}

// nodeIndex keeps nodes findable by free capacity, so placing a task
// looks at a bucket, not at every node.
type nodeIndex struct {
	classes []classIndex
	all     bitset // schedulable nodes
	rel     bitset // schedulable nodes with capacity being freed
	// where each node currently sits: per node, per nodeClass entry.
	at [][]int
}

func newNodeIndex(c *cycle) nodeIndex {
	n := len(c.nodes)
	x := nodeIndex{classes: make([]classIndex, len(c.classes)), all: newBitset(n), rel: newBitset(n), at: make([][]int, n)}
	for i, cl := range c.classes {
		x.classes[i].buckets = make([]bitset, cl.maxPerNode+1)
		for k := range x.classes[i].buckets {
			x.classes[i].buckets[k] = newBitset(n)
		}
		x.classes[i].partial = newBitset(n)
	}
	for i := range c.nodes {
		ns := &c.nodes[i]
		x.at[i] = make([]int, len(ns.classes))
		for k := range x.at[i] {
			x.at[i][k] = -1
		}
		if ns.schedulable {
			x.all.set(i)
		}
		x.update(c, i)
	}
	return x
}

// update re-files node n after its capacity changed: O(devices on n).
func (x *nodeIndex) update(c *cycle, n int) {
	ns := &c.nodes[n]
	if !ns.schedulable {
		return
	}
	if ns.rel > 0 {
		x.rel.set(n)
	} else {
		x.rel.clear(n)
	}
	for k := range ns.classes {
		nc := &ns.classes[k]
		nc.free, nc.partial = 0, false
	}
	for p := range ns.devs {
		d := &ns.devs[p]
		k := ns.classPos(d.class)
		switch {
		case d.used+d.rel == 0:
			ns.classes[k].free++
		case d.frac > 0 && d.used+d.rel < OneGPU:
			ns.classes[k].partial = true
		}
	}
	for k := range ns.classes {
		nc := &ns.classes[k]
		ci := &x.classes[nc.class]
		if old := x.at[n][k]; old != nc.free {
			if old >= 0 {
				ci.buckets[old].clear(n)
			}
			ci.buckets[nc.free].set(n)
			x.at[n][k] = nc.free
		}
		if nc.partial {
			ci.partial.set(n)
		} else {
			ci.partial.clear(n)
		}
	}
}

func (n *nodeState) classPos(class int) int {
	for k := range n.classes {
		if n.classes[k].class == class {
			return k
		}
	}
	return -1
}
