package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimOutputAndExitCodes(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.yaml")
	writeTestFile(t, broken, "nodes:\n  - {name: n0, gpus: 1}\nqueues:\n  - {name: a}\njobs:\n  - {name: j, queue: nope, tasks: [{gpu: 1}]}\n")
	wrong := filepath.Join(dir, "wrong.yaml")
	writeTestFile(t, wrong, "# expects the wrong node\nnodes:\n  - {name: n0, gpus: 1}\nqueues:\n  - {name: a}\njobs:\n  - {name: j, queue: a, priority: train, tasks: [{gpu: 1}]}\nexpect:\n  jobs:\n    j: {tasks: [{node: n9}]}\n")
	testCLICases(t, []cliCase{
		{name: "tables per cycle, reasons and the expect check", args: []string{"sim", "../testdata/sched/reclaim-takes-borrowed-gpus.yaml"},
			stdout: "cycle 1: 1 placed, 2 evicted, 0 pending"},
		{name: "evictions show the action and why", args: []string{"sim", "../testdata/sched/reclaim-takes-borrowed-gpus.yaml"},
			stdout: "reclaimed by job a1 of queue a: queue b holds more than it may keep"},
		{name: "pending jobs carry their reason", args: []string{"sim", "../testdata/sched/limit-blocks-job.yaml"},
			stdout: "pending j: queue team-a is at its limit of 2 GPUs"},
		{name: "a scenario error names the field", args: []string{"sim", broken}, code: exitInvalidInput,
			stderr: `jobs[0].queue: "nope" is not a queue of this scenario`},
		{name: "a failed expectation exits 1", args: []string{"sim", wrong}, code: exitInvalidInput,
			stderr: "expect.jobs.j.tasks[0].node: want \"n9\""},
		{name: "no scenario is a usage error", args: []string{"sim"}, code: exitUsage, stderr: "sim takes one scenario file"},
	})
}

// TestSimJSONContract checks the --json shape scenario authors and
// acceptance checks rely on.
func TestSimJSONContract(t *testing.T) {
	stdout := mustRunCLI(t, "sim", "--json", "../testdata/sched/reclaim-takes-borrowed-gpus.yaml")
	var got struct {
		Jobs map[string]struct {
			Status string `json:"status"`
			Reason string `json:"reason"`
			Tasks  []struct {
				Status  string `json:"status"`
				Node    string `json:"node"`
				Devices []int  `json:"devices"`
			} `json:"tasks"`
		} `json:"jobs"`
		Queues map[string]struct {
			FairShare map[string]float64 `json:"fair_share"`
			Allocated map[string]float64 `json:"allocated"`
		} `json:"queues"`
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode: %v", err)
	}
	a1 := got.Jobs["a1"]
	if a1.Status != "pipelined" || len(a1.Tasks) != 1 || a1.Tasks[0].Node != "n0" || len(a1.Tasks[0].Devices) != 2 {
		t.Errorf("a1 = %+v, want pipelined on n0 with two devices", a1)
	}
	if got.Jobs["b8"].Status != "evicted" {
		t.Errorf("b8 = %+v, want evicted", got.Jobs["b8"])
	}
	if q := got.Queues["b"]; q.FairShare["gpu"] != 6 || q.Allocated["gpu"] != 6 {
		t.Errorf("queue b = %+v, want fair share and allocation of 6 GPUs", q)
	}
}

// TestSimPrintsEveryCycle checks --json --cycles: one state per cycle, so
// a reclaim shows the victim evicted in the first and pending in the
// second, with the running tasks' devices picked by the loader.
func TestSimPrintsEveryCycle(t *testing.T) {
	stdout := mustRunCLI(t, "sim", "--json", "--cycles", "../testdata/sched/sim-reclaim-converges.yaml")
	var got []struct {
		Jobs map[string]struct {
			Status string `json:"status"`
			Tasks  []struct {
				Devices []int `json:"devices"`
			} `json:"tasks"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("decode: %v\n%s", err, stdout)
	}
	if len(got) != 3 {
		t.Fatalf("%d states, want one per cycle (3)", len(got))
	}
	if got[0].Jobs["b4"].Status != "evicted" || got[1].Jobs["b4"].Status != "pending" || got[1].Jobs["a1"].Status != "running" {
		t.Errorf("b4 %q then %q, a1 then %q: want evicted, pending, running", got[0].Jobs["b4"].Status, got[1].Jobs["b4"].Status, got[1].Jobs["a1"].Status)
	}
	if d := got[0].Jobs["b2"].Tasks[0].Devices; len(d) != 2 || d[0] != 2 || d[1] != 3 {
		t.Errorf("b2 runs on devices %v, want [2 3] (assigned in file order)", d)
	}
	text := mustRunCLI(t, "sim", "../testdata/sched/sim-reclaim-converges.yaml")
	for _, want := range []string{"before cycle 2:\n    b4 task 0 terminated on n0 and waits again\n    a1 task 0 bound on n0 devices 6,7 and runs", "expect: ok"} {
		if !strings.Contains(text, want) {
			t.Errorf("sim output lacks %q:\n%s", want, text)
		}
	}
}
