package sched

import (
	"strings"
	"testing"
)

// TestTaskMatchesAnyNamedModelWithinItsMemoryRange: a task that names
// several models takes devices of any of them, a device memory maximum
// keeps larger devices out, and a job whose selector has a Name is told
// why it waits in those words.
func TestTaskMatchesAnyNamedModelWithinItsMemoryRange(t *testing.T) {
	node := func(name, model string, mem int64) Node {
		n := Node{Name: name, CPU: 8000, Memory: 64 << 30, Labels: map[string]string{"pool": name}}
		for i := range 2 {
			n.Devices = append(n.Devices, Device{Index: i, Name: model, Memory: mem})
		}
		return n
	}
	snap := &Snapshot{
		Nodes:  []Node{node("h100", "H100", 80<<30), node("mi300x", "MI300X", 192<<30)},
		Queues: []Queue{{Name: "q", Quota: Resources{Unlimited, Unlimited, Unlimited}, Limit: Resources{Unlimited, Unlimited, Unlimited}}},
		Jobs: []Job{
			{Name: "any", Queue: "q", Tasks: []Task{{GPU: OneGPU, GPUName: "A100,MI300X"}}},
			{Name: "small", Queue: "q", Tasks: []Task{{GPU: OneGPU, GPUMemory: 40 << 30, GPUMemoryMax: 100 << 30}}},
			{Name: "none", Queue: "q", Tasks: []Task{{GPU: OneGPU, GPUMemory: 100 << 30, GPUMemoryMax: 150 << 30}}},
			{Name: "named", Queue: "q", Tasks: []Task{{CPU: 1000}},
				Nodes: NodeSelector{Key: "pool", Values: []string{"nowhere"}, Name: "fleet \"lab\""}},
		},
	}
	plan := Schedule(snap)
	on := map[string]string{}
	for _, p := range plan.Placements {
		on[p.Job] = p.Node
	}
	if on["any"] != "mi300x" || on["small"] != "h100" {
		t.Errorf("placements %v, want any on mi300x and small on h100", on)
	}
	if why := plan.Pending["none"]; on["none"] != "" || !strings.Contains(why, "100GB..150GB") {
		t.Errorf("a 100GB..150GB task: placed on %q, pending %q", on["none"], why)
	}
	if why := plan.Pending["named"]; !strings.Contains(why, `no schedulable node has fleet "lab"`) {
		t.Errorf("a job with a named selector waits with %q", why)
	}
}
