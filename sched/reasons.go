package sched

import (
	"strconv"
	"strings"
)

// amount formats a quantity of a resource for a reason: "16 GPUs",
// "0.5 GPU", "32 CPUs", "256GB".
func amount(r Resource, v int64) string {
	switch r {
	case GPU, CPU:
		word := "GPU"
		if r == CPU {
			word = "CPU"
		}
		unit := r.Unit()
		s := strconv.FormatFloat(float64(v)/float64(unit), 'f', -1, 64)
		if v != unit && v >= unit || v == 0 {
			word += "s"
		}
		return s + " " + word
	default:
		return sizeText(v)
	}
}

func sizeText(v int64) string {
	const gb = 1 << 30
	if v%gb == 0 || v >= 10*gb {
		return strconv.FormatFloat(float64(v)/gb, 'f', -1, 64) + "GB"
	}
	return strconv.FormatFloat(float64(v)/(1<<20), 'f', 0, 64) + "MB"
}

// gpuKind describes the devices a task accepts: "H100 GPUs", "80GB GPUs",
// "1g.10gb MIG instances".
func gpuKind(t *Task) string {
	if t.MIG != "" {
		return strings.TrimSpace(t.GPUName+" "+t.MIG) + " MIG instances"
	}
	var parts []string
	switch {
	case t.GPUMemoryMax > 0:
		parts = append(parts, sizeText(t.GPUMemory)+".."+sizeText(t.GPUMemoryMax))
	case t.GPUMemory > 0:
		parts = append(parts, sizeText(t.GPUMemory))
	}
	if t.GPUName != "" {
		parts = append(parts, strings.ReplaceAll(t.GPUName, ",", " or "))
	}
	parts = append(parts, "GPUs")
	return strings.Join(parts, " ")
}

// countable makes a plural kind singular for a count of one.
func countable(kind string, n int64) string {
	if n == 1 {
		return strings.TrimSuffix(kind, "s")
	}
	return kind
}

// taskShape describes one task's request: "8×H100", "0.5×GPU", "16 CPUs".
func taskShape(t *Task) string {
	if t.GPU == 0 {
		return amount(CPU, t.CPU)
	}
	name := "GPU"
	if t.GPUName != "" {
		name = strings.ReplaceAll(t.GPUName, ",", " or ")
	}
	if t.MIG != "" {
		name += " " + t.MIG
	}
	return strconv.FormatFloat(float64(t.GPU)/float64(OneGPU), 'f', -1, 64) + "×" + name
}

// reasonFor is the one sentence a pending job carries in the plan.
func (c *cycle) reasonFor(j int) string {
	js := &c.jobs[j]
	if js.reason != "" && js.capacityBound && js.noReclaim != "" {
		return js.reason + "; " + js.noReclaim
	}
	if js.reason != "" {
		return js.reason
	}
	if js.active >= js.minM {
		return "elastic job runs " + strconv.Itoa(js.active) + " of " + strconv.Itoa(len(js.tasks)) +
			" tasks; there was no turn to grow it this cycle"
	}
	return "not considered: no action of this cycle places jobs"
}

// overShare says why job j may not reclaim req from other queues (the
// check canReclaim failed): its queue would go over its fair share, or,
// for a job that is not preemptible, over its deserved quota.
func (c *cycle) overShare(j int, req Resources) string {
	js := &c.jobs[j]
	qs := &c.queues[js.queue]
	for i := range req {
		r := Resource(i)
		if qs.alloc[r]+req[r] > qs.fair[r] {
			holds := "it holds " + amount(r, qs.alloc[r])
			if req[r] > 0 {
				holds += ", the job needs " + amount(r, req[r])
			}
			return "queue " + qs.q.Name + " would go over its fair share of " + amount(r, qs.fair[r]) + " (" + holds +
				"), so it takes nothing back from other queues"
		}
		if !js.job.Preemptible && !leq(qs.npAlloc[r]+req[r], qs.quota[r]) {
			return "the job is not preemptible and queue " + qs.q.Name + " would go over its deserved " + amount(r, qs.quota[r]) +
				", so it takes nothing back from other queues"
		}
	}
	return ""
}

// explainPlacement says why tasks of job j found no place, checking from
// the most permanent cause (no such hardware) to the most passing one
// (capacity in use right now).
func (c *cycle) explainPlacement(j int, tasks []int) string {
	js := &c.jobs[j]
	if c.idx.all.next(0, nil) < 0 {
		return "no node is schedulable"
	}
	if sel := js.job.Nodes; js.eligible != nil && c.idx.all.next(0, js.eligible) < 0 {
		return "no schedulable node has " + c.narrowest(sel)
	}
	for _, t := range tasks {
		if r := c.explainImpossible(&js.job.Tasks[t], js.eligible); r != "" {
			return r
		}
	}
	tc := js.job.Topology
	if tc.Name != "" && tc.Required != "" {
		doms := c.topology(tc.Name).levels[tc.Required]
		if len(doms) == 0 {
			return "no node carries the " + tc.Required + " label of topology " + tc.Name
		}
		best := 0
		for _, d := range doms {
			n, ok := c.placeTasks(j, tasks, d.nodes, freeSoon, Allocate)
			if ok { // cannot happen after a failed placement; undo anyway
				c.rollback(len(c.log) - n)
			}
			best = max(best, n)
		}
		return "gang needs " + strconv.Itoa(len(tasks)) + " tasks of " + taskShape(&js.job.Tasks[tasks[0]]) +
			" in one " + tc.Required + "; the best " + tc.Required + " fits " + strconv.Itoa(best)
	}
	if len(tasks) > 1 {
		n, ok := c.placeTasks(j, tasks, nil, freeSoon, Allocate)
		if ok {
			c.rollback(len(c.log) - n)
		}
		return "gang needs " + strconv.Itoa(len(tasks)) + " tasks of " + taskShape(&js.job.Tasks[tasks[0]]) +
			" at once; free capacity fits " + strconv.Itoa(n)
	}
	return c.explainBusy(&js.job.Tasks[tasks[0]], js.eligible)
}

// narrowest describes the parts of sel's And that no schedulable node of
// sel's own Key (a project's nodes) meets on its own ("fleet "lab" below
// its nodes max 2 (…)"), or all of sel when only their combination
// selects none. Nodes outside the Key's are never looked at: they may
// belong to another project.
func (c *cycle) narrowest(sel NodeSelector) string {
	base := NodeSelector{Key: sel.Key, Values: sel.Values, Name: sel.Name}
	if c.idx.all.next(0, nil) < 0 || !c.anySelected(base) {
		return sel.String()
	}
	var none []string
	for _, p := range sel.And {
		if p.IsZero() {
			continue
		}
		if !c.anySelected(NodeSelector{Key: sel.Key, Values: sel.Values, And: []NodeSelector{p}}) {
			none = append(none, p.String())
		}
	}
	if len(none) == 0 {
		return sel.String()
	}
	return strings.Join(none, " and ")
}

// anySelected reports whether a schedulable node meets sel.
func (c *cycle) anySelected(sel NodeSelector) bool {
	for n := c.idx.all.next(0, nil); n >= 0; n = c.idx.all.next(n+1, nil) {
		if sel.selects(c.nodes[n].node) {
			return true
		}
	}
	return false
}

// explainImpossible names a request no schedulable node in mask (nil:
// any) could ever meet. Nodes outside a job's mask are never described to
// it: they may belong to another project.
func (c *cycle) explainImpossible(t *Task, mask bitset) string {
	var maxCPU, maxMem int64
	maxDevs := 0
	classes := c.matchingClasses(t)
	for n := c.idx.all.next(0, mask); n >= 0; n = c.idx.all.next(n+1, mask) {
		ns := &c.nodes[n]
		maxCPU, maxMem = max(maxCPU, ns.node.CPU), max(maxMem, ns.node.Memory)
		for _, nc := range ns.classes {
			for _, cl := range classes {
				if nc.class == cl {
					maxDevs = max(maxDevs, nc.total)
				}
			}
		}
	}
	want := int((t.GPU + OneGPU - 1) / OneGPU)
	switch {
	case t.GPU > 0 && maxDevs == 0:
		return "no node has " + gpuKind(t)
	case want > maxDevs:
		return "no node has " + strconv.Itoa(want) + " " + countable(gpuKind(t), int64(want)) + "; the largest has " + strconv.Itoa(maxDevs)
	case t.CPU > maxCPU:
		return "no node has " + amount(CPU, t.CPU) + "; the largest has " + amount(CPU, maxCPU)
	case t.Memory > maxMem:
		return "no node has " + sizeText(t.Memory) + " of memory; the largest has " + sizeText(maxMem)
	}
	return ""
}

// explainBusy names the resource that is short right now for one task on
// the nodes in mask (nil: any).
func (c *cycle) explainBusy(t *Task, mask bitset) string {
	var freeCPU, freeMem, bestGPU int64
	classes := c.matchingClasses(t)
	for n := c.idx.all.next(0, mask); n >= 0; n = c.idx.all.next(n+1, mask) {
		ns := &c.nodes[n]
		freeCPU = max(freeCPU, ns.node.CPU-ns.usedCPU-ns.relCPU)
		freeMem = max(freeMem, ns.node.Memory-ns.usedMem-ns.relMem)
		if t.GPU == 0 {
			continue
		}
		var whole, part int64
		for p := range ns.devs {
			d := &ns.devs[p]
			for _, cl := range classes {
				if d.class != cl {
					continue
				}
				if d.free(freeNow) == OneGPU {
					whole += OneGPU
				} else if d.frac > 0 {
					part = max(part, d.free(freeNow))
				}
			}
		}
		if t.GPU < OneGPU {
			whole = max(min(whole, OneGPU), part)
		}
		bestGPU = max(bestGPU, whole)
	}
	switch {
	case t.GPU >= OneGPU && bestGPU < t.GPU:
		return "no node has " + strconv.FormatInt(t.GPU/OneGPU, 10) + " free " + countable(gpuKind(t), t.GPU/OneGPU) + "; the most on one node is " +
			strconv.FormatInt(bestGPU/OneGPU, 10)
	case t.GPU > 0 && t.GPU < OneGPU && bestGPU < t.GPU:
		return "no " + strings.TrimSuffix(gpuKind(t), "s") + " has " + amount(GPU, t.GPU) + " free; the most on one device is " +
			amount(GPU, bestGPU)
	case t.CPU > freeCPU:
		return "no node has " + amount(CPU, t.CPU) + " free; the most on one node is " + amount(CPU, freeCPU)
	case t.Memory > freeMem:
		return "no node has " + sizeText(t.Memory) + " of memory free; the most on one node is " + sizeText(freeMem)
	}
	return "no node has " + taskShape(t) + " with " + amount(CPU, t.CPU) + " and " + sizeText(t.Memory) + " free together"
}

func quoteAll(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strconv.Quote(v)
	}
	return out
}
