package scenario

import (
	"math"
	"slices"

	"gpud.dev/gpud/sched"
)

// Result is the outcome of a scenario run: every cycle's plan and the state
// after the last one.
type Result struct {
	Plans []sched.Plan
	Final State
}

// State is the --json contract: jobs and queues after the last cycle.
type State struct {
	Jobs   map[string]JobState   `json:"jobs"`
	Queues map[string]QueueState `json:"queues"`
}

// JobState is one job after the last cycle. Status is running, pipelined,
// evicted, pending or releasing when every task agrees, else mixed.
type JobState struct {
	Status string      `json:"status"`
	Reason string      `json:"reason,omitempty"`
	Tasks  []TaskState `json:"tasks"`
}

// TaskState is one task after the last cycle; evicted marks a victim of
// the last cycle.
type TaskState struct {
	Status  string `json:"status"`
	Node    string `json:"node,omitempty"`
	Devices []int  `json:"devices,omitempty"`
}

// QueueState is a queue's fair share and allocation after the last cycle:
// gpu in devices, cpu in cores, memory in GB.
type QueueState struct {
	FairShare map[string]float64 `json:"fair_share"`
	Allocated map[string]float64 `json:"allocated"`
}

// Run runs the scenario's cycles. Between cycles placed tasks start
// running, pipelined and evicted tasks go back to pending, releasing
// tasks finish, and running tasks age by the cycle length.
func Run(s *Scenario) Result {
	snap := cloneSnapshot(&s.Snapshot)
	var res Result
	var plan sched.Plan
	for cycle := 0; cycle < s.Cycles; cycle++ {
		if cycle > 0 {
			advance(snap, &plan, s)
		}
		plan = sched.Schedule(snap)
		res.Plans = append(res.Plans, plan)
	}
	res.Final = finalState(snap, &plan)
	return res
}

// cloneSnapshot copies the parts Run changes between cycles.
func cloneSnapshot(s *sched.Snapshot) *sched.Snapshot {
	c := *s
	c.Jobs = slices.Clone(s.Jobs)
	for i := range c.Jobs {
		c.Jobs[i].Tasks = slices.Clone(c.Jobs[i].Tasks)
	}
	return &c
}

// advance applies a plan to the snapshot as the cluster would carry it out.
func advance(snap *sched.Snapshot, plan *sched.Plan, s *Scenario) {
	byName := map[string]int{}
	for i := range snap.Jobs {
		byName[snap.Jobs[i].Name] = i
	}
	for _, e := range plan.Evictions {
		t := &snap.Jobs[byName[e.Job]].Tasks[e.Task]
		*t = pendingCopy(t)
	}
	for _, p := range plan.Placements {
		t := &snap.Jobs[byName[p.Job]].Tasks[p.Task]
		if p.Pipelined {
			*t = pendingCopy(t)
			continue
		}
		t.Status, t.Node, t.Devices, t.Runtime = sched.Running, p.Node, p.Devices, 0
	}
	for i := range snap.Jobs {
		tasks := snap.Jobs[i].Tasks[:0]
		for _, t := range snap.Jobs[i].Tasks {
			if t.Status == sched.Releasing {
				continue // finished terminating
			}
			if t.Status == sched.Running {
				t.Runtime += s.CycleLength
			}
			tasks = append(tasks, t)
		}
		snap.Jobs[i].Tasks = tasks
	}
	for i := range snap.Jobs {
		j := &snap.Jobs[i]
		running := 0
		for _, t := range j.Tasks {
			if t.Status == sched.Running {
				running++
			}
		}
		min := j.MinMembers
		if min <= 0 {
			min = len(j.Tasks)
		}
		if running > 0 && running < min {
			j.StaleFor += s.CycleLength
		} else {
			j.StaleFor = 0
		}
	}
}

func pendingCopy(t *sched.Task) sched.Task {
	c := *t
	c.Status, c.Node, c.Devices, c.Runtime = sched.Pending, "", nil, 0
	return c
}

// finalState reports the snapshot as the last plan leaves it.
func finalState(snap *sched.Snapshot, plan *sched.Plan) State {
	st := State{Jobs: map[string]JobState{}, Queues: map[string]QueueState{}}
	type key struct {
		job  string
		task int
	}
	placed := map[key]sched.Placement{}
	for _, p := range plan.Placements {
		placed[key{p.Job, p.Task}] = p
	}
	evicted := map[key]bool{}
	for _, e := range plan.Evictions {
		evicted[key{e.Job, e.Task}] = true
	}
	for _, j := range snap.Jobs {
		js := JobState{Reason: plan.Pending[j.Name]}
		for i, t := range j.Tasks {
			ts := TaskState{Status: t.Status.String(), Node: t.Node, Devices: t.Devices}
			if p, ok := placed[key{j.Name, i}]; ok {
				ts = TaskState{Status: "running", Node: p.Node, Devices: p.Devices}
				if p.Pipelined {
					ts.Status = "pipelined"
				}
			} else if evicted[key{j.Name, i}] {
				ts = TaskState{Status: "evicted"}
			}
			js.Tasks = append(js.Tasks, ts)
		}
		js.Status = jobStatus(js.Tasks)
		st.Jobs[j.Name] = js
	}
	for _, q := range plan.Queues {
		st.Queues[q.Name] = QueueState{FairShare: units(q.FairShare), Allocated: units(q.Allocated)}
	}
	return st
}

func jobStatus(tasks []TaskState) string {
	if len(tasks) == 0 {
		return "pending"
	}
	s := tasks[0].Status
	for _, t := range tasks[1:] {
		if t.Status != s {
			return "mixed"
		}
	}
	return s
}

// units converts sched's milli-units and bytes to devices, cores and GB.
func units(r sched.Resources) map[string]float64 {
	round := func(f float64) float64 { return math.Round(f*1000) / 1000 }
	return map[string]float64{
		"gpu":    round(float64(r[sched.GPU]) / 1000),
		"cpu":    round(float64(r[sched.CPU]) / 1000),
		"memory": round(float64(r[sched.Memory]) / (1 << 30)),
	}
}
