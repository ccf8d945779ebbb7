package sched

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkConsolidateFragmented: 5,000 nodes × 8 GPUs, each running seven
// preemptible 1-GPU jobs (35,000), so every node has one GPU free and no
// 8-GPU job fits; 500 pending 8-GPU jobs each need seven jobs moved off
// one node (the running jobs share one queue, so the first victims in
// order, the newest, share a node). Consolidation alone, one cycle. Not
// every job is served: once the next 16 victims in order include tasks
// moved earlier in the cycle, which stay put, the shape fails for the
// rest of the action.
func BenchmarkConsolidateFragmented(b *testing.B) {
	s := benchCluster(5000)
	for n := range 5000 {
		for d := range 7 {
			i := n*7 + d
			s.Jobs = append(s.Jobs, Job{Name: fmt.Sprintf("r%d", i), Queue: leafName(0), Priority: 50, Preemptible: true,
				Tasks: []Task{{GPU: 1000, CPU: 4000, Memory: 32 << 30, Status: Running, Node: s.Nodes[n].Name,
					Devices: []int{d}, Runtime: time.Hour}}})
		}
	}
	pendingJobs(s, 500, 1, 8000)
	s.Policy.Actions = []Action{Consolidate}
	b.ResetTimer()
	var p Plan
	for range b.N {
		p = Schedule(s)
	}
	placed := 0
	for _, pl := range p.Placements {
		if pl.Job[0] == 'p' {
			placed++
		}
	}
	if placed == 0 {
		b.Fatal("consolidated for none of the 500 jobs")
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cycle")
	b.ReportMetric(float64(placed), "jobs")
	b.ReportMetric(float64(len(p.Evictions)), "moves")
}
