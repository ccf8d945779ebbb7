package scenario

import (
	"strings"
	"testing"
)

// TestParseReportsEveryFieldError checks that a bad scenario names each
// wrong field with its path and the fix, all at once.
func TestParseReportsEveryFieldError(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{name: "unknown queue and job priority class", yaml: `
nodes: [{name: n0, gpus: 1}]
queues: [{name: a}]
jobs: [{name: j, queue: b, priority: urgent, tasks: [{gpu: 1}]}]`,
			want: []string{`jobs[0].queue: "b" is not a queue of this scenario`, `jobs[0].priority: "urgent": use a number or train`}},
		{name: "parent listed after child", yaml: `
queues: [{name: a, parent: org}, {name: org}]`,
			want: []string{`queues[0].parent: "org" is not a queue listed before this one`}},
		{name: "running task without node or devices", yaml: `
nodes: [{name: n0, gpus: 2}]
queues: [{name: a}]
jobs: [{name: j, queue: a, tasks: [{gpu: 2, status: running, node: n9, device: 0}]}]`,
			want: []string{`jobs[0].tasks[0].node: "n9": a running task needs a node`, `jobs[0].tasks[0].devices: [0]: a task with gpu 2 runs on 2 device(s)`}},
		{name: "fraction above one", yaml: `
queues: [{name: a}]
jobs: [{name: j, queue: a, tasks: [{gpu: 1.5}]}]`,
			want: []string{`jobs[0].tasks[0].gpu: 1.5: use a fraction below 1 or a whole number of GPUs`}},
		{name: "bad sizes, durations and policies", yaml: `
nodes: [{name: n0, memory: lots}]
queues: [{name: a, reclaim_min_runtime: soon}]
run: {placement: {gpu: tight}, actions: [allocate, shuffle]}`,
			want: []string{`nodes[0].memory:`, `queues[0].reclaim_min_runtime:`, `run.placement.gpu: "tight": use binpack or spread`,
				`run.actions[1]: "shuffle"`}},
		{name: "unknown field is a typo", yaml: `
nodes: [{name: n0, gpu: 8}]`,
			want: []string{`unknown field "gpu"`}},
		{name: "topology level that does not exist", yaml: `
nodes: [{name: n0, gpus: 1}]
topologies: [{name: dc, levels: [rack]}]
queues: [{name: a}]
jobs: [{name: j, queue: a, topology: {name: dc, required: row}, tasks: [{gpu: 1}]}]`,
			want: []string{`jobs[0].topology: level "row" is not one of rack`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain: %s", err, w)
				}
			}
		})
	}
}

// TestParseDefaults checks the defaults the contract promises.
func TestParseDefaults(t *testing.T) {
	s, err := Parse([]byte(`
nodes: [{name: n0, gpus: 2}]
queues: [{name: org}, {name: a, parent: org}]
jobs: [{name: j, queue: a, priority: build-preemptible, tasks: [{gpu: 1, count: 3}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	n := s.Snapshot.Nodes[0]
	if n.CPU != 64000 || n.Memory != 512<<30 || len(n.Devices) != 2 {
		t.Errorf("node defaults: cpu %d, memory %d, devices %d", n.CPU, n.Memory, len(n.Devices))
	}
	j := s.Snapshot.Jobs[0]
	if j.Priority != 75 || !j.Preemptible || len(j.Tasks) != 3 {
		t.Errorf("job: priority %d, preemptible %v, tasks %d", j.Priority, j.Preemptible, len(j.Tasks))
	}
	q := s.Snapshot.Queues[1]
	if q.Priority != 100 || q.Limit[0] != -1 || q.Quota[0] != 0 || q.OverQuotaWeight[0] != 1 {
		t.Errorf("queue defaults: %+v", q)
	}
	if s.Cycles != 1 || s.Snapshot.Policy.StaleGangGrace.Seconds() != 60 {
		t.Errorf("run defaults: cycles %d, grace %v", s.Cycles, s.Snapshot.Policy.StaleGangGrace)
	}
}

// TestLoaderAssignsDevicesToRunningTasks checks that running and releasing
// tasks may leave out their devices: whole GPUs take the lowest free
// indices around the ones named, fractions the first device with room.
func TestLoaderAssignsDevicesToRunningTasks(t *testing.T) {
	s, err := Parse([]byte(`
nodes: [{name: n0, gpus: 5}, {name: n1, gpus: 2, mig: {1g.10gb: 2}}]
queues: [{name: a}]
jobs:
  - {name: named, queue: a, tasks: [{gpu: 1, status: running, node: n0, device: 1}]}
  - {name: whole, queue: a, tasks: [{gpu: 2, status: running, node: n0}]}
  - {name: half, queue: a, tasks: [{gpu: 0.5, status: releasing, node: n0, count: 3}]}
  - {name: mig, queue: a, tasks: [{gpu: 1, mig: 1g.10gb, status: running, node: n1}]}
  - {name: cpu, queue: a, tasks: [{cpu: 2, status: running, node: n1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][][]int{}
	for _, j := range s.Snapshot.Jobs {
		for _, task := range j.Tasks {
			got[j.Name] = append(got[j.Name], task.Devices)
		}
	}
	want := `{"cpu":[null],"half":[[3],[3],[4]],"mig":[[2]],"named":[[1]],"whole":[[0,2]]}`
	if show(got) != want {
		t.Errorf("devices:\n got %s\nwant %s", show(got), want)
	}
}

// TestLoaderRefusesRunningTasksWithoutRoom checks that a device-less
// running task on a full node is an error naming the task and the fix.
func TestLoaderRefusesRunningTasksWithoutRoom(t *testing.T) {
	_, err := Parse([]byte(`
nodes: [{name: n0, gpus: 2}]
queues: [{name: a}]
jobs:
  - {name: j, queue: a, tasks: [{gpu: 1, status: running, node: n0, count: 3}]}`))
	if err == nil || !strings.Contains(err.Error(), "jobs[0].tasks[0].devices: node n0 has 0 free device(s) for this task, it needs 1") {
		t.Fatalf("err = %v", err)
	}
}
