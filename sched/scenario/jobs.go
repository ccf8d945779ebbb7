package scenario

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"gpud.dev/gpud/sched"
)

func (b *builder) jobs(snap *sched.Snapshot, jobs []fileJob) {
	var todo []unplacedDevices
	seen := map[string]bool{}
	queues := map[string]bool{}
	nodes := map[string]bool{}
	for _, q := range snap.Queues {
		queues[q.Name] = true
	}
	for _, n := range snap.Nodes {
		nodes[n.Name] = true
	}
	for i, j := range jobs {
		p := fmt.Sprintf("jobs[%d]", i)
		if j.Name == "" || seen[j.Name] {
			b.fail(p+".name", "%q: every job needs a unique name", j.Name)
		}
		seen[j.Name] = true
		if !queues[j.Queue] {
			b.fail(p+".queue", "%q is not a queue of this scenario", j.Queue)
		}
		job := sched.Job{
			Name: j.Name, Queue: j.Queue, MinMembers: j.MinMembers, Priority: 100,
			Topology: sched.TopologyConstraint{Name: j.Topology.Name, Required: j.Topology.Required, Preferred: j.Topology.Preferred},
			StaleFor: b.duration(p+".stale_for", j.StaleFor),
			Nodes:    sched.NodeSelector{Key: j.Nodes.Key, Values: j.Nodes.Values},
		}
		if g := b.grace(p+".stale_gang_grace", j.StaleGangGrace); j.StaleGangGrace != "" {
			job.StaleGangGrace = &g
		}
		if j.Nodes.Key == "" && len(j.Nodes.Values) > 0 {
			b.fail(p+".nodes.key", "values without a key: name the node label, like key: project")
		}
		switch v := j.Priority.(type) {
		case nil:
		case string:
			prio, ok := priorityClasses()[v]
			if !ok {
				b.fail(p+".priority", "%q: use a number or train, build-preemptible, build, inference", v)
			}
			job.Priority = prio
		default:
			f, ok := number(v)
			if !ok {
				b.fail(p+".priority", "%v: use a number or train, build-preemptible, build, inference", v)
			}
			job.Priority = int(f)
		}
		job.Preemptible = job.Priority < 100
		if j.Preemptible != nil {
			job.Preemptible = *j.Preemptible
		}
		for k, t := range j.Tasks {
			tp := fmt.Sprintf("%s.tasks[%d]", p, k)
			task, pick := b.task(tp, t, nodes)
			for c := 0; c < max(t.Count, 1); c++ {
				if pick {
					todo = append(todo, unplacedDevices{path: tp, job: len(snap.Jobs), task: len(job.Tasks)})
				}
				task.Devices = slices.Clone(task.Devices)
				job.Tasks = append(job.Tasks, task)
			}
		}
		if len(job.Tasks) == 0 {
			b.fail(p+".tasks", "a job needs at least one task")
		}
		if j.MinMembers > len(job.Tasks) || j.MinMembers < 0 {
			b.fail(p+".min_members", "%d: must be between 1 and the number of tasks (%d)", j.MinMembers, len(job.Tasks))
		}
		if tc := job.Topology; tc.Name != "" {
			b.checkTopology(p+".topology", snap, tc)
		}
		snap.Jobs = append(snap.Jobs, job)
	}
	b.assignDevices(snap, todo)
}

func (b *builder) checkTopology(p string, snap *sched.Snapshot, tc sched.TopologyConstraint) {
	i := slices.IndexFunc(snap.Topologies, func(t sched.Topology) bool { return t.Name == tc.Name })
	if i < 0 {
		b.fail(p+".name", "%q is not a topology of this scenario", tc.Name)
		return
	}
	for _, l := range []string{tc.Required, tc.Preferred} {
		if l != "" && !slices.Contains(snap.Topologies[i].Levels, l) {
			b.fail(p, "level %q is not one of %s", l, strings.Join(snap.Topologies[i].Levels, ", "))
		}
	}
}

// task reads one task; pick reports a running or releasing task that
// names no devices, whose devices the loader assigns (assignDevices).
func (b *builder) task(p string, t fileTask, nodes map[string]bool) (task sched.Task, pick bool) {
	task = sched.Task{
		GPU: b.milli(p+".gpu", t.GPU, 0), GPUName: t.GPUName, MIG: t.MIG, MPS: t.MPS,
		GPUMemory: b.size(p+".gpu_memory", t.GPUMemory, 0),
		CPU:       b.milli(p+".cpu", t.CPU, 0),
		Memory:    b.size(p+".memory", t.Memory, 0),
		Node:      t.Node,
		Runtime:   b.duration(p+".runtime", t.Runtime),
	}
	if task.GPU < 0 || (task.GPU > sched.OneGPU && task.GPU%sched.OneGPU != 0) {
		b.fail(p+".gpu", "%v: use a fraction below 1 or a whole number of GPUs", t.GPU)
	}
	status := t.Status
	switch status {
	case "", "pending":
		status = "pending"
	case "running":
		task.Status = sched.Running
	case "releasing":
		task.Status = sched.Releasing
	default:
		b.fail(p+".status", "%q: use pending, running or releasing", t.Status)
	}
	if task.Status != sched.Pending {
		if !nodes[t.Node] {
			b.fail(p+".node", "%q: a %s task needs a node of this scenario", t.Node, status)
		}
		task.Devices = t.Devices
		if t.Device != nil {
			task.Devices = append([]int{*t.Device}, task.Devices...)
		}
		want := 1
		if task.GPU >= sched.OneGPU {
			want = int(task.GPU / sched.OneGPU)
		}
		if task.GPU == 0 {
			want = 0
		}
		if len(task.Devices) == 0 && want > 0 {
			pick = true
		} else if len(task.Devices) != want {
			b.fail(p+".devices", "%v: a task with gpu %v runs on %d device(s)", task.Devices, t.GPU, want)
		}
	} else if t.Node != "" || t.Device != nil || len(t.Devices) > 0 {
		b.fail(p+".node", "a pending task has no node or devices")
	}
	return task, pick
}

func (b *builder) usage(snap *sched.Snapshot, f *file) {
	u := &snap.Usage
	u.Window = b.duration("usage.window", f.Usage.Window)
	u.HalfLife = b.duration("usage.half_life", f.Usage.HalfLife)
	u.K = 1
	if f.Usage.K != nil {
		u.K = *f.Usage.K
	}
	if len(f.Usage.Queues) > 0 {
		u.Queues = map[string][]sched.UsageRecord{}
	}
	for i, r := range f.Usage.Capacity {
		u.Capacity = append(u.Capacity, sched.UsageRecord{
			Age:   b.duration(fmt.Sprintf("usage.capacity[%d].age", i), r.Age),
			Hours: [sched.NumResources]float64{r.GPUHours, r.CPUHours, r.MemoryHours},
		})
	}
	for name, recs := range f.Usage.Queues {
		for i, r := range recs {
			u.Queues[name] = append(u.Queues[name], sched.UsageRecord{
				Age:   b.duration(fmt.Sprintf("usage.queues.%s[%d].age", name, i), r.Age),
				Hours: [sched.NumResources]float64{r.GPUHours, r.CPUHours, r.MemoryHours},
			})
		}
	}
}

func (b *builder) run(s *Scenario, f *file) {
	pol := &s.Snapshot.Policy
	for i, a := range f.Run.Actions {
		if !slices.Contains(sched.AllActions(), sched.Action(a)) {
			b.fail(fmt.Sprintf("run.actions[%d]", i), "%q: use allocate, consolidate, reclaim, preempt or stale_gang", a)
		}
		pol.Actions = append(pol.Actions, sched.Action(a))
	}
	for k, v := range f.Run.Placement {
		var st sched.Strategy
		switch v {
		case "binpack":
			st = sched.BinPack
		case "spread":
			st = sched.Spread
		default:
			b.fail("run.placement."+k, "%q: use binpack or spread", v)
		}
		switch k {
		case "gpu":
			pol.GPU = st
		case "cpu":
			pol.CPU = st
		default:
			b.fail("run.placement."+k, "use gpu or cpu")
		}
	}
	pol.StaleGangGrace = b.grace("run.stale_gang_grace", f.Run.StaleGangGrace)
	if f.Run.StaleGangGrace == "" {
		pol.StaleGangGrace = 60e9
	}
	s.CycleLength = b.duration("run.cycle_length", f.Run.CycleLength)
	if f.Run.CycleLength == "" {
		s.CycleLength = 60e9
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// grace reads a stale-gang grace period: a duration, or never (KAI: a
// negative staleness grace period turns the eviction off).
func (b *builder) grace(path, v string) time.Duration {
	if v == "never" {
		return -1
	}
	return b.duration(path, v)
}
