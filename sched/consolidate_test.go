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

// TestPipelinedGangStartsTogether checks over random clusters with
// releasing tasks KAI's gang rule for pipelining: a job that has a member pipelined never has
// another bound in the same plan unless the bound and running members
// already reach its minimum.
func TestPipelinedGangStartsTogether(t *testing.T) {
	cases := 3000
	if testing.Short() {
		cases = 300
	}
	checked := 0
	for seed := range cases {
		r := rand.New(rand.NewPCG(uint64(seed), 13))
		s := randomCluster(r)
		applyPlan(r, s, Schedule(s)) // marks some running tasks releasing
		s.Policy.Actions = []Action{Allocate, Consolidate}
		p := Schedule(s)
		bound, pipelined := map[string]int{}, map[string]int{}
		for _, pl := range p.Placements {
			if pl.Pipelined {
				pipelined[pl.Job]++
			} else {
				bound[pl.Job]++
			}
		}
		evicted := map[string]int{}
		for _, e := range p.Evictions {
			evicted[e.Job]++
		}
		for i := range s.Jobs {
			j := &s.Jobs[i]
			if pipelined[j.Name] == 0 || bound[j.Name] == 0 {
				continue
			}
			checked++
			running := -evicted[j.Name]
			for _, task := range j.Tasks {
				if task.Status == Running {
					running++
				}
			}
			minM := j.MinMembers
			if minM <= 0 || minM > len(j.Tasks) {
				minM = len(j.Tasks)
			}
			if running+bound[j.Name] < minM {
				t.Fatalf("seed %d: job %s has %d members bound and %d pipelined below its minimum %d (%d running)",
					seed, j.Name, bound[j.Name], pipelined[j.Name], minM, running)
			}
		}
	}
	t.Logf("%d jobs with both bound and pipelined members checked", checked)
}
