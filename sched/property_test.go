package sched

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// randomCluster builds a small random cluster, queue tree and workload.
// Every job starts pending; running state comes from a first cycle, so the
// properties are checked on states the scheduler itself produced.
func randomCluster(r *rand.Rand) *Snapshot {
	s := &Snapshot{Topologies: []Topology{{Name: "dc", Levels: []string{"zone", "rack"}}}}
	models := []string{"H100", "A100"}
	for n := range 1 + r.IntN(6) {
		node := Node{
			Name:   fmt.Sprintf("n%d", n),
			CPU:    int64(8+r.IntN(57)) * 1000,
			Memory: int64(16+r.IntN(240)) << 30,
			Labels: map[string]string{"zone": fmt.Sprint("z", r.IntN(2)), "rack": fmt.Sprint("r", r.IntN(3))},
		}
		model := models[r.IntN(2)]
		for d := range r.IntN(9) {
			node.Devices = append(node.Devices, Device{Index: d, Name: model, Memory: 80 << 30})
		}
		if r.IntN(4) == 0 {
			for range 1 + r.IntN(3) {
				node.Devices = append(node.Devices, Device{Index: len(node.Devices), Name: model, Memory: 10 << 30, MIG: "1g.10gb"})
			}
		}
		node.Unschedulable = r.IntN(10) == 0
		s.Nodes = append(s.Nodes, node)
	}
	amount := func(unit int64) int64 {
		switch r.IntN(4) {
		case 0:
			return Unlimited
		case 1:
			return 0
		}
		return int64(r.IntN(12)) * unit
	}
	var leaves []string
	for top := range 1 + r.IntN(2) {
		name := fmt.Sprintf("q%d", top)
		kids := r.IntN(3)
		q := Queue{Name: name, Priority: 100 + 50*r.IntN(2), OverQuotaWeight: [NumResources]float64{1, 1, 1}}
		q.Quota = Resources{amount(1000), amount(1000), amount(1 << 30)}
		q.Limit = Resources{amount(1000), Unlimited, Unlimited}
		if kids > 0 && r.IntN(2) == 0 {
			q.Quota = Resources{FromChildren, FromChildren, FromChildren}
		}
		s.Queues = append(s.Queues, q)
		if kids == 0 {
			leaves = append(leaves, name)
		}
		for k := range kids {
			child := Queue{
				Name: fmt.Sprintf("%s-%d", name, k), Parent: name, Priority: 100,
				Quota:           Resources{amount(1000), amount(1000), Unlimited},
				Limit:           Resources{amount(1000), Unlimited, Unlimited},
				OverQuotaWeight: [NumResources]float64{float64(1 + r.IntN(3)), 1, 1},
			}
			s.Queues = append(s.Queues, child)
			leaves = append(leaves, child.Name)
		}
	}
	s.Jobs = randomJobs(r, leaves, 1+r.IntN(12), "j")
	if r.IntN(3) == 0 {
		s.Usage = Usage{K: 1, HalfLife: time.Hour, Queues: map[string][]UsageRecord{leaves[0]: {{Age: time.Hour, Hours: [NumResources]float64{10, 0, 0}}}}}
	}
	if r.IntN(3) == 0 {
		s.Policy.GPU = Spread
	}
	return s
}

func randomJobs(r *rand.Rand, leaves []string, n int, prefix string) []Job {
	var jobs []Job
	gpus := []int64{0, 250, 500, 1000, 1000, 2000, 4000}
	for j := range n {
		prio := []int{50, 75, 100, 125}[r.IntN(4)]
		job := Job{Name: fmt.Sprintf("%s%d", prefix, j), Queue: leaves[r.IntN(len(leaves))], Priority: prio, Preemptible: prio < 100}
		shape := Task{GPU: gpus[r.IntN(len(gpus))], CPU: int64(r.IntN(8)) * 1000, Memory: int64(r.IntN(16)) << 30}
		if r.IntN(8) == 0 {
			shape.GPU, shape.MIG = 1000, "1g.10gb"
		}
		if r.IntN(4) == 0 {
			shape.GPUName = "H100"
		}
		for range 1 + r.IntN(4) {
			job.Tasks = append(job.Tasks, shape)
		}
		job.MinMembers = 1 + r.IntN(len(job.Tasks))
		if r.IntN(4) == 0 {
			job.Topology = TopologyConstraint{Name: "dc", Required: "zone", Preferred: "rack"}
		}
		jobs = append(jobs, job)
	}
	return jobs
}

// applyPlan carries a plan out as the next snapshot would see it, marks
// some running tasks as releasing and ages the rest.
func applyPlan(r *rand.Rand, s *Snapshot, p Plan) {
	idx := map[string]int{}
	for i := range s.Jobs {
		idx[s.Jobs[i].Name] = i
	}
	for _, e := range p.Evictions {
		t := &s.Jobs[idx[e.Job]].Tasks[e.Task]
		t.Status, t.Node, t.Devices = Pending, "", nil
	}
	for _, pl := range p.Placements {
		t := &s.Jobs[idx[pl.Job]].Tasks[pl.Task]
		if !pl.Pipelined {
			t.Status, t.Node, t.Devices = Running, pl.Node, pl.Devices
		}
	}
	for j := range s.Jobs {
		for t := range s.Jobs[j].Tasks {
			task := &s.Jobs[j].Tasks[t]
			if task.Status == Running {
				task.Runtime = time.Duration(r.IntN(120)) * time.Minute
				if r.IntN(10) == 0 {
					task.Status = Releasing
				}
			}
		}
		s.Jobs[j].StaleFor = time.Duration(r.IntN(3)) * time.Minute
	}
}

// TestPropertiesOnRandomClusters checks, over random clusters and
// workloads, the invariants every plan must keep: no device or node
// over-committed, no queue above its limit at any level, no gang partly
// placed, non-preemptible usage within deserved quota at every level, and
// the same plan for the same input.
func TestPropertiesOnRandomClusters(t *testing.T) {
	cases := 5000 // two cycles each: 10,000 plans checked
	if testing.Short() {
		cases = 500
	}
	for seed := range cases {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		s := randomCluster(r)
		first := Schedule(s)
		checkPlan(t, seed, s, first)
		applyPlan(r, s, first)
		var leaves []string
		for _, q := range s.Queues {
			leaves = append(leaves, q.Name)
		}
		s.Jobs = append(s.Jobs, randomJobs(r, leaves[len(leaves)-1:], 1+r.IntN(6), "k")...)
		second := Schedule(s)
		checkPlan(t, seed, s, second)
		if again := Schedule(s); !reflect.DeepEqual(again, second) {
			t.Fatalf("seed %d: the same snapshot gave two different plans", seed)
		}
	}
}

func checkPlan(t *testing.T, seed int, s *Snapshot, p Plan) {
	t.Helper()
	c := newCycle(s)
	c.computeFairShare()
	evicted := map[[2]int]bool{}
	jobIdx := map[string]int{}
	for i := range s.Jobs {
		jobIdx[s.Jobs[i].Name] = i
	}
	for _, e := range p.Evictions {
		evicted[[2]int{jobIdx[e.Job], e.Task}] = true
		job := &s.Jobs[jobIdx[e.Job]]
		if !job.Preemptible && e.Action != StaleGang {
			t.Fatalf("seed %d: %s evicted non-preemptible job %s", seed, e.Action, e.Job)
		}
	}
	type use struct{ gpu, cpu, mem int64 }
	// after: what holds capacity once the plan is carried out (kept
	// running tasks and every placement); now: what holds it before any
	// victim stops (running, releasing, victims, bound placements).
	after := map[string]map[int]int64{}
	now := map[string]map[int]int64{}
	whole := map[string]map[int]int{}
	hostAfter, hostNow := map[string]*use{}, map[string]*use{}
	add := func(m map[string]map[int]int64, h map[string]*use, node string, t *Task, devs []int) {
		if m[node] == nil {
			m[node] = map[int]int64{}
			h[node] = &use{}
		}
		for _, d := range devs {
			m[node][d] += min(t.GPU, 1000)
		}
		h[node].cpu += t.CPU
		h[node].mem += t.Memory
	}
	alloc := make([]Resources, len(s.Queues))
	nonPre := make([]Resources, len(s.Queues))
	active := make([]int, len(s.Jobs))
	hadActive := make([]int, len(s.Jobs))
	hold := func(j int, task *Task) {
		active[j]++
		q := c.queueBy[s.Jobs[j].Queue]
		for _, a := range c.queues[q].path {
			alloc[a] = alloc[a].Add(task.Request())
			if !s.Jobs[j].Preemptible {
				nonPre[a] = nonPre[a].Add(task.Request())
			}
		}
	}
	for j := range s.Jobs {
		for ti := range s.Jobs[j].Tasks {
			task := &s.Jobs[j].Tasks[ti]
			if task.Status == Pending {
				continue
			}
			add(now, hostNow, task.Node, task, task.Devices)
			if task.Status == Running {
				hadActive[j]++
				if !evicted[[2]int{j, ti}] {
					add(after, hostAfter, task.Node, task, task.Devices)
					hold(j, task)
				}
			}
		}
	}
	for _, pl := range p.Placements {
		j := jobIdx[pl.Job]
		task := &s.Jobs[j].Tasks[pl.Task]
		add(after, hostAfter, pl.Node, task, pl.Devices)
		if !pl.Pipelined {
			add(now, hostNow, pl.Node, task, pl.Devices)
		}
		hold(j, task)
		if task.GPU >= 1000 {
			for _, d := range pl.Devices {
				if whole[pl.Node] == nil {
					whole[pl.Node] = map[int]int{}
				}
				whole[pl.Node][d]++
			}
		}
	}
	for _, n := range s.Nodes {
		for _, m := range []map[string]map[int]int64{after, now} {
			for d, used := range m[n.Name] {
				if used > 1000 {
					t.Fatalf("seed %d: node %s device %d over-committed: %d milli-GPUs", seed, n.Name, d, used)
				}
			}
		}
		for _, h := range []map[string]*use{hostAfter, hostNow} {
			if u := h[n.Name]; u != nil && (u.cpu > n.CPU || u.mem > n.Memory) {
				t.Fatalf("seed %d: node %s over-committed: cpu %d/%d mem %d/%d", seed, n.Name, u.cpu, n.CPU, u.mem, n.Memory)
			}
		}
		for d, k := range whole[n.Name] {
			if k > 0 && after[n.Name][d] > 1000 {
				t.Fatalf("seed %d: whole-GPU task shares device %d on %s", seed, d, n.Name)
			}
		}
	}
	for q := range s.Queues {
		qs := &c.queues[q]
		for r := range NumResources {
			if l := qs.limit[r]; l >= 0 && alloc[q][r] > l && alloc[q][r] > qs.alloc[r] {
				t.Fatalf("seed %d: queue %s above its %s limit: %d > %d", seed, qs.q.Name, r, alloc[q][r], l)
			}
			if d := qs.quota[r]; d >= 0 && nonPre[q][r] > d && nonPre[q][r] > qs.npAlloc[r] {
				t.Fatalf("seed %d: queue %s non-preemptible %s above deserved: %d > %d", seed, qs.q.Name, r, nonPre[q][r], d)
			}
		}
	}
	for j := range s.Jobs {
		minM := s.Jobs[j].MinMembers
		if minM <= 0 || minM > len(s.Jobs[j].Tasks) {
			minM = len(s.Jobs[j].Tasks)
		}
		if active[j] > 0 && active[j] < minM && active[j] > hadActive[j] {
			t.Fatalf("seed %d: gang %s partly placed: %d of min %d", seed, s.Jobs[j].Name, active[j], minM)
		}
	}
}
