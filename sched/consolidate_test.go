package sched

import (
	"math/rand/v2"
	"testing"
)

// TestConsolidationMovesEveryVictimOrNothing checks over random clusters
// that consolidation is all or nothing: every task it evicts is placed
// again in the same plan (pipelined), it moves only preemptible jobs, and
// everything it places is pipelined (KAI places pipeline-only).
func TestConsolidationMovesEveryVictimOrNothing(t *testing.T) {
	cases := 3000
	if testing.Short() {
		cases = 300
	}
	moves := 0
	for seed := range cases {
		r := rand.New(rand.NewPCG(uint64(seed), 11))
		s := randomCluster(r)
		applyPlan(r, s, Schedule(s))
		var leaves []string
		for _, q := range s.Queues {
			leaves = append(leaves, q.Name)
		}
		s.Jobs = append(s.Jobs, randomJobs(r, leaves[len(leaves)-1:], 1+r.IntN(6), "k")...)
		s.Policy.Actions = []Action{Allocate, Consolidate}
		p := Schedule(s)
		type key struct {
			job  string
			task int
		}
		placed := map[key]bool{}
		for _, pl := range p.Placements {
			if pl.Action == Consolidate {
				placed[key{pl.Job, pl.Task}] = true
				if !pl.Pipelined {
					t.Fatalf("seed %d: consolidation bound %s task %d instead of pipelining it", seed, pl.Job, pl.Task)
				}
			}
		}
		byName := map[string]*Job{}
		for i := range s.Jobs {
			byName[s.Jobs[i].Name] = &s.Jobs[i]
		}
		for _, e := range p.Evictions {
			if e.Action != Consolidate {
				continue
			}
			moves++
			if !byName[e.Job].Preemptible {
				t.Fatalf("seed %d: consolidation moved non-preemptible job %s", seed, e.Job)
			}
			if !placed[key{e.Job, e.Task}] {
				t.Fatalf("seed %d: consolidation evicted %s task %d and did not place it again", seed, e.Job, e.Task)
			}
		}
	}
	if moves == 0 {
		t.Fatal("no random cluster exercised a consolidation move")
	}
	t.Logf("%d consolidation moves checked", moves)
}
