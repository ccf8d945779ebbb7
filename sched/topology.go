package sched

import (
	"slices"
	"strings"
)

// domain is one group of nodes that share the label values of a topology
// down to one level (a rack within its zone, say).
type domain struct {
	key   string
	nodes bitset
	list  []int
}

// topologyIndex holds each level's domains, built once per cycle on first
// use.
type topologyIndex struct {
	levels map[string][]domain
}

func (c *cycle) topology(name string) *topologyIndex {
	if ti, ok := c.topo[name]; ok {
		return ti
	}
	var levels []string
	for _, t := range c.snap.Topologies {
		if t.Name == name {
			levels = t.Levels
		}
	}
	ti := &topologyIndex{levels: map[string][]domain{}}
	for depth, level := range levels {
		byKey := map[string]int{}
		var doms []domain
		for n := range c.nodes {
			labels := c.nodes[n].node.Labels
			parts := make([]string, 0, depth+1)
			complete := true
			for _, l := range levels[:depth+1] {
				v, ok := labels[l]
				if !ok {
					complete = false
					break
				}
				parts = append(parts, v)
			}
			if !complete {
				continue
			}
			key := strings.Join(parts, "/")
			k, ok := byKey[key]
			if !ok {
				k = len(doms)
				byKey[key] = k
				doms = append(doms, domain{key: key, nodes: newBitset(len(c.nodes))})
			}
			doms[k].nodes.set(n)
			doms[k].list = append(doms[k].list, n)
		}
		slices.SortFunc(doms, func(a, b domain) int { return strings.Compare(a.key, b.key) })
		ti.levels[level] = doms
	}
	c.topo[name] = ti
	return ti
}

// domainsByTightness returns the domains at level that have enough free
// capacity for the tasks, tightest first (spread: roomiest first).
func (c *cycle) domainsByTightness(j int, tasks []int, topo, level string) []domain {
	doms := c.topology(topo).levels[level]
	js := &c.jobs[j]
	need := js.request(tasks)
	var classes []int
	if len(tasks) > 0 {
		classes = c.matchingClasses(&js.job.Tasks[tasks[0]])
	}
	type cand struct {
		d    domain
		room int64
	}
	var out []cand
	for _, d := range doms {
		var gpu, cpu int64
		for _, n := range d.list {
			ns := &c.nodes[n]
			if !ns.schedulable {
				continue
			}
			cpu += ns.node.CPU - ns.usedCPU
			for p := range ns.devs {
				dv := &ns.devs[p]
				if slices.Contains(classes, dv.class) {
					gpu += OneGPU - dv.used
				}
			}
		}
		if gpu < need[GPU] || cpu < need[CPU] {
			continue
		}
		room := gpu
		if need[GPU] == 0 {
			room = cpu
		}
		out = append(out, cand{d, room})
	}
	slices.SortStableFunc(out, func(a, b cand) int {
		switch {
		case c.gpu.before(a.room, b.room):
			return -1
		case c.gpu.before(b.room, a.room):
			return 1
		}
		return 0
	})
	res := make([]domain, len(out))
	for i := range out {
		res[i] = out[i].d
	}
	return res
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
