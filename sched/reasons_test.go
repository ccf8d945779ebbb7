package sched

import (
	"strings"
	"testing"
)

// TestSelectorReasonNamesThePartNoNodeMeets: a job whose project has nodes
// but whose fleet is at its nodes max waits naming the cap alone; a
// project's nodes are the only ones looked at, so another project's node
// with the label changes nothing; a project without nodes gets the whole
// selector.
func TestSelectorReasonNamesThePartNoNodeMeets(t *testing.T) {
	mine := Node{Name: "mine", CPU: 8000, Memory: 64 << 30, Labels: map[string]string{"project": "a"}}
	theirs := Node{Name: "theirs", CPU: 8000, Memory: 64 << 30, Labels: map[string]string{"project": "b", "slot": "free"}}
	capped := NodeSelector{Key: "project", Values: []string{"a"}, Name: `project "a"`,
		And: []NodeSelector{{Key: "slot", Values: []string{"free"}, Name: `fleet "lab" below its nodes max 1`}}}
	homeless := NodeSelector{Key: "project", Values: []string{"c"}, Name: `project "c"`,
		And: []NodeSelector{{Key: "slot", Values: []string{"free"}, Name: `fleet "lab" below its nodes max 1`}}}
	snap := &Snapshot{
		Nodes:  []Node{mine, theirs},
		Queues: []Queue{{Name: "q", Quota: Resources{Unlimited, Unlimited, Unlimited}, Limit: Resources{Unlimited, Unlimited, Unlimited}}},
		Jobs: []Job{
			{Name: "capped", Queue: "q", Tasks: []Task{{CPU: 1000}}, Nodes: capped},
			{Name: "homeless", Queue: "q", Tasks: []Task{{CPU: 1000}}, Nodes: homeless},
		},
	}
	plan := Schedule(snap)
	if why := plan.Pending["capped"]; why != `no schedulable node has fleet "lab" below its nodes max 1` {
		t.Errorf("capped waits with %q", why)
	}
	if why := plan.Pending["homeless"]; !strings.Contains(why, `project "c" and fleet "lab"`) {
		t.Errorf("homeless waits with %q", why)
	}
}
