package scenario

import (
	"fmt"
	"math"
	"slices"

	"gpud.dev/gpud/sched"
)

// Result is the outcome of a scenario run: every cycle's plan, the state
// each cycle leaves, and the state after the last one (Final is the last
// of Cycles).
type Result struct {
	Plans  []sched.Plan
	Cycles []State
	Final  State
	// Between holds, for each cycle but the last, what the cluster did
	// before the next one: victims terminated, releasing tasks finished,
	// pipelined tasks bound (or left waiting).
	Between [][]string
}

// State is the --json contract: jobs and queues after the last cycle.
type State struct {
	Jobs   map[string]JobState   `json:"jobs"`
	Queues map[string]QueueState `json:"queues"`
}

// JobState is one job after a cycle. Status is running, pipelined,
// evicted, pending, releasing or finished when every task agrees, else
// mixed.
type JobState struct {
	Status string      `json:"status"`
	Reason string      `json:"reason,omitempty"`
	Tasks  []TaskState `json:"tasks"`
}

// TaskState is one task after a cycle; evicted marks a victim of that
// cycle, finished a task that stopped releasing in an earlier one (listed
// after the job's other tasks).
type TaskState struct {
	Status  string `json:"status"`
	Node    string `json:"node,omitempty"`
	Devices []int  `json:"devices,omitempty"`
}

// QueueState is a queue's fair share and allocation after a cycle: gpu in
// devices, cpu in cores, memory in GB.
type QueueState struct {
	FairShare map[string]float64 `json:"fair_share"`
	Allocated map[string]float64 `json:"allocated"`
}

// Run runs the scenario's cycles. Between two cycles the simulated cluster
// carries out the plan as a cluster does (advance): victims terminate and
// their jobs wait again, releasing tasks finish, tasks placed now start
// running, pipelined tasks bind and run once the capacity they wait for is
// free, and running tasks age by the cycle length.
func Run(s *Scenario) Result {
	snap := cloneSnapshot(&s.Snapshot)
	finished := make([]int, len(snap.Jobs)) // per job, tasks that finished
	var res Result
	var plan sched.Plan
	for cycle := 0; cycle < s.Cycles; cycle++ {
		if cycle > 0 {
			res.Between = append(res.Between, advance(snap, &plan, s, finished))
		}
		plan = sched.Schedule(snap)
		res.Plans = append(res.Plans, plan)
		res.Cycles = append(res.Cycles, stateAfter(snap, &plan, finished))
	}
	res.Final = res.Cycles[len(res.Cycles)-1]
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

// advance applies a plan to the snapshot as the cluster would carry it
// out before the next cycle (KAI's cluster between two sessions): evicted
// tasks terminate, so they free their capacity and wait as pending again;
// releasing tasks finish and leave; tasks bound now run; then each job's
// pipelined tasks bind together where the freed capacity now holds them
// all, else they wait as pending for the next cycle to place again. It
// returns one line per change that is not a plain start.
func advance(snap *sched.Snapshot, plan *sched.Plan, s *Scenario, finished []int) []string {
	var events []string
	byName := map[string]int{}
	for i := range snap.Jobs {
		byName[snap.Jobs[i].Name] = i
	}
	for _, e := range plan.Evictions {
		t := &snap.Jobs[byName[e.Job]].Tasks[e.Task]
		*t = pendingCopy(t)
		events = append(events, fmt.Sprintf("%s task %d terminated on %s and waits again", e.Job, e.Task, e.Node))
	}
	pipelined := map[int][]sched.Placement{}
	for _, p := range plan.Placements {
		j := byName[p.Job]
		t := &snap.Jobs[j].Tasks[p.Task]
		if p.Pipelined {
			*t = pendingCopy(t)
			pipelined[j] = append(pipelined[j], p)
			continue
		}
		t.Status, t.Node, t.Devices, t.Runtime = sched.Running, p.Node, p.Devices, 0
	}
	// Releasing tasks finish. A task index is kept until the job's
	// pipelined placements are bound, so drop finished tasks last.
	for i := range snap.Jobs {
		for k := range snap.Jobs[i].Tasks {
			switch t := &snap.Jobs[i].Tasks[k]; t.Status {
			case sched.Running:
				t.Runtime += s.CycleLength
			case sched.Releasing:
				events = append(events, fmt.Sprintf("%s task %d finished releasing on %s", snap.Jobs[i].Name, k, t.Node))
			}
		}
	}
	free := newCapacity(snap)
	for _, j := range sortedInts(pipelined) {
		if !free.holds(snap, j, pipelined[j]) {
			// Stays pending: the next cycle places it again.
			events = append(events, fmt.Sprintf("%s waits: the capacity it was pipelined onto is not free yet", snap.Jobs[j].Name))
			continue
		}
		for _, p := range pipelined[j] {
			t := &snap.Jobs[j].Tasks[p.Task]
			t.Status, t.Node, t.Devices, t.Runtime = sched.Running, p.Node, slices.Clone(p.Devices), 0
			free.take(t)
			events = append(events, fmt.Sprintf("%s task %d bound on %s devices %s and runs", snap.Jobs[j].Name, p.Task, p.Node, ints(p.Devices)))
		}
	}
	for i := range snap.Jobs {
		tasks := snap.Jobs[i].Tasks[:0]
		for _, t := range snap.Jobs[i].Tasks {
			if t.Status == sched.Releasing {
				finished[i]++
				continue
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
	return events
}

func pendingCopy(t *sched.Task) sched.Task {
	c := *t
	c.Status, c.Node, c.Devices, c.Runtime = sched.Pending, "", nil, 0
	return c
}

// stateAfter reports the snapshot as a cycle's plan leaves it.
func stateAfter(snap *sched.Snapshot, plan *sched.Plan, finished []int) State {
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
	for ji, j := range snap.Jobs {
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
		for range finished[ji] {
			js.Tasks = append(js.Tasks, TaskState{Status: "finished"})
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
