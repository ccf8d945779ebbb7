package sched

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// benchCluster builds nodes × 8 H100s in racks of 32, and a 3-level queue
// tree: 2 departments, 5 teams each, 5 leaf queues per team (50 leaves).
func benchCluster(nodes int) *Snapshot {
	s := &Snapshot{Topologies: []Topology{{Name: "dc", Levels: []string{"rack"}}}}
	for n := range nodes {
		node := Node{Name: fmt.Sprintf("n%05d", n), CPU: 128000, Memory: 1 << 40,
			Labels: map[string]string{"rack": fmt.Sprintf("r%03d", n/32)}}
		for d := range 8 {
			node.Devices = append(node.Devices, Device{Index: d, Name: "H100", Memory: 80 << 30})
		}
		s.Nodes = append(s.Nodes, node)
	}
	gpus := int64(nodes) * 8000
	for d := range 2 {
		dept := fmt.Sprintf("dept%d", d)
		s.Queues = append(s.Queues, Queue{Name: dept, Quota: Resources{gpus / 2, Unlimited, Unlimited},
			Limit: Resources{Unlimited, Unlimited, Unlimited}, OverQuotaWeight: [NumResources]float64{1, 1, 1}, Priority: 100})
		for t := range 5 {
			team := fmt.Sprintf("%s-team%d", dept, t)
			s.Queues = append(s.Queues, Queue{Name: team, Parent: dept, Quota: Resources{gpus / 10, Unlimited, Unlimited},
				Limit: Resources{Unlimited, Unlimited, Unlimited}, OverQuotaWeight: [NumResources]float64{1, 1, 1}, Priority: 100})
		}
	}
	for d := range 2 {
		for t := range 5 {
			team := fmt.Sprintf("dept%d-team%d", d, t)
			for l := range 5 {
				s.Queues = append(s.Queues, Queue{Name: fmt.Sprintf("%s-q%d", team, l), Parent: team,
					Quota: Resources{gpus / 50, Unlimited, Unlimited}, Limit: Resources{Unlimited, Unlimited, Unlimited},
					OverQuotaWeight: [NumResources]float64{1, 1, 1}, Priority: 100})
			}
		}
	}
	return s
}

func leafName(i int) string {
	return fmt.Sprintf("dept%d-team%d-q%d", i/25%2, i/5%5, i%5)
}

func pendingJobs(s *Snapshot, jobs, tasks int, gpu int64) {
	for j := range jobs {
		job := Job{Name: fmt.Sprintf("p%d", j), Queue: leafName(j % 50), Priority: 50, Preemptible: true}
		for range tasks {
			job.Tasks = append(job.Tasks, Task{GPU: gpu, CPU: 4000, Memory: 32 << 30})
		}
		s.Jobs = append(s.Jobs, job)
	}
}

// benchPlacements times Schedule over s b.N times, fails unless every
// cycle placed want tasks, and reports placements/s and ms/cycle.
func benchPlacements(b *testing.B, s *Snapshot, want int) {
	b.Helper()
	b.ResetTimer()
	placed := 0
	for range b.N {
		placed = len(Schedule(s).Placements)
	}
	if placed != want {
		b.Fatalf("placed %d of %d", placed, want)
	}
	b.ReportMetric(float64(placed)*float64(b.N)/b.Elapsed().Seconds(), "placements/s")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cycle")
}

// BenchmarkAllocate1GPUJobs: 5,000 nodes × 8 GPUs, 50 leaf queues, 20,000
// pending 1-GPU jobs in one cycle. Goal: at least 10,000 placements/s.
func BenchmarkAllocate1GPUJobs(b *testing.B) {
	s := benchCluster(5000)
	pendingJobs(s, 20000, 1, 1000)
	s.Policy.Actions = []Action{Allocate}
	benchPlacements(b, s, 20000)
}

// BenchmarkAllocateGangs: 2,000 pending gangs of 8 one-GPU tasks on 5,000
// nodes, every action on.
func BenchmarkAllocateGangs(b *testing.B) {
	s := benchCluster(5000)
	pendingJobs(s, 2000, 8, 1000)
	benchPlacements(b, s, 16000)
}

// BenchmarkAllocateGangsInOneRack: 2,000 pending 8-task gangs that each
// require one rack (32 nodes), on 5,000 nodes.
func BenchmarkAllocateGangsInOneRack(b *testing.B) {
	s := benchCluster(5000)
	pendingJobs(s, 2000, 8, 1000)
	for j := range s.Jobs {
		s.Jobs[j].Topology = TopologyConstraint{Name: "dc", Required: "rack"}
	}
	s.Policy.Actions = []Action{Allocate}
	benchPlacements(b, s, 16000)
}

// BenchmarkReclaimCycle100kRunning: one full cycle (every action) over
// 12,500 nodes full with 100,000 running 1-GPU tasks, all of one
// department's queues that borrowed the other's share; the other
// department's queues submit 500 jobs that must reclaim. Goal: under
// 500 ms per cycle.
func BenchmarkReclaimCycle100kRunning(b *testing.B) {
	s := benchCluster(12500)
	for i := range 100000 {
		n := i / 8
		s.Jobs = append(s.Jobs, Job{Name: fmt.Sprintf("r%d", i), Queue: leafName(25 + i%25), Priority: 50, Preemptible: true,
			Tasks: []Task{{GPU: 1000, CPU: 4000, Memory: 32 << 30, Status: Running, Node: s.Nodes[n].Name,
				Devices: []int{i % 8}, Runtime: time.Hour}}})
	}
	pendingJobs(s, 500, 1, 1000)
	for j := 100000; j < len(s.Jobs); j++ {
		s.Jobs[j].Queue = leafName(j % 25)
	}
	b.ResetTimer()
	var p Plan
	for range b.N {
		p = Schedule(s)
	}
	if len(p.Evictions) < 500 || len(p.Placements) < 500 {
		b.Fatalf("evicted %d, placed %d; want 500 reclaimed", len(p.Evictions), len(p.Placements))
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cycle")
	b.ReportMetric(float64(len(p.Evictions)), "evictions")
}

// BenchmarkMemoryPerNodeAndTask reports the cycle state's heap bytes per
// node (an empty cluster) and per running task.
func BenchmarkMemoryPerNodeAndTask(b *testing.B) {
	const nodes, tasks = 5000, 40000
	empty := benchCluster(nodes)
	full := benchCluster(nodes)
	for i := range tasks {
		full.Jobs = append(full.Jobs, Job{Name: fmt.Sprintf("r%d", i), Queue: leafName(i % 50), Priority: 50, Preemptible: true,
			Tasks: []Task{{GPU: 1000, Status: Running, Node: full.Nodes[i/8].Name, Devices: []int{i % 8}}}})
	}
	heap := func(s *Snapshot) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := newCycle(s)
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(c)
		return float64(after.TotalAlloc - before.TotalAlloc)
	}
	var perNode, perTask float64
	for range b.N {
		e := heap(empty)
		perNode = e / nodes
		perTask = (heap(full) - e) / tasks
	}
	b.ReportMetric(perNode, "B/node")
	b.ReportMetric(perTask, "B/task")
}
