package cli

import (
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
)

// TestPrintFleetsShowsBackendFleets: a backend fleet gets a row of its own
// table, with each backend entry and the backends it selects, the nodes
// in use against the max, and why an entry selects none.
func TestPrintFleetsShowsBackendFleets(t *testing.T) {
	two := 2
	fs := []api.Fleet{
		{Name: "metal", Status: "active", Instances: []api.Instance{{Hostname: "h1", Backend: "ssh", Status: "idle"}}},
		{Name: "bf", Status: "active", Backends: []api.FleetBackend{{Name: "kubernetes", Selects: []string{"k8s", "k8s-eu"}}, {Name: "lab", Selects: []string{"lab"}}},
			Nodes: &api.FleetNodesUse{InUse: 1, Max: &two}},
		{Name: "gone", Status: "no backend", Backends: []api.FleetBackend{{Name: "old", Selects: []string{}, Reason: "no backend old"}}, Nodes: &api.FleetNodesUse{}},
	}
	var b strings.Builder
	if err := printFleets(&b, fs, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"h1", "NODES IN USE", "kubernetes (k8s, k8s-eu), lab", "1/2", "old (none)", "no backend old"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := printFleets(&b, fs[1:2], time.Now()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "HOST") {
		t.Errorf("a backend fleet alone printed the hosts' table:\n%s", b.String())
	}
}
