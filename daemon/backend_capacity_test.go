package daemon

import (
	"testing"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/sched"
)

// TestBackendNodeNamesAndMatching: a backend capacity node's name gives
// back its project and backend, a host's does not; a run's placement and
// host needs keep a job off a backend where the backend cannot tell or
// honour them.
func TestBackendNodeNamesAndMatching(t *testing.T) {
	name := backendNodeName("main", "lab", offerKey(api.Offer{Instance: "a100/x8", Region: "eu"}))
	if name != "backend:main/lab/a100_x8@eu" {
		t.Fatalf("name %q", name)
	}
	if p, b, ok := backendOfNode(name); !ok || p != "main" || b != "lab" {
		t.Fatalf("backendOfNode(%q) = %q %q %v", name, p, b, ok)
	}
	for _, host := range []string{"local-vm", "backend:", "backend:main", "backend:/lab/x", "backend:main//x"} {
		if _, _, ok := backendOfNode(host); ok {
			t.Errorf("%q read as a backend node", host)
		}
	}
	n := sched.Node{Name: name, Labels: map[string]string{backendLabel: jobBackendLabel, projectLabel: "main", backendTypeLabel: "test", backendNameLabel: "Lab"},
		Devices: []sched.Device{{Name: "A100"}}}
	for _, c := range []struct {
		why     string
		project string
		p       runPlacement
		needs   []hostNeeds
		want    bool
	}{
		{"anything", "main", runPlacement{}, nil, true},
		{"another project", "other", runPlacement{}, nil, false},
		{"its type", "main", runPlacement{Backends: []string{"ssh", "test"}}, nil, true},
		{"its name", "main", runPlacement{Backends: []string{"lab"}}, nil, true},
		{"other backends", "main", runPlacement{Backends: []string{"ssh", "kubernetes"}}, nil, false},
		{"fleets name hosts", "main", runPlacement{Fleets: []string{"f"}}, nil, false},
		{"an image and python are fine", "main", runPlacement{}, []hostNeeds{{Image: true, Python: "3.12"}}, true},
		{"nvidia", "main", runPlacement{}, []hostNeeds{{Vendor: "nvidia"}}, true},
		{"amd", "main", runPlacement{}, []hostNeeds{{Vendor: "amd"}}, false},
		{"arch unknown", "main", runPlacement{}, []hostNeeds{{Arch: "arm64"}}, false},
		{"privileged", "main", runPlacement{}, []hostNeeds{{Privileged: true}}, false},
		{"instance volumes", "main", runPlacement{}, []hostNeeds{{Volumes: "/data"}}, false},
		{"a managed volume's host", "main", runPlacement{}, []hostNeeds{{Hosts: "h1"}}, false},
	} {
		if got := backendNodeMatches(n, c.project, c.p, c.needs); got != c.want {
			t.Errorf("%s: %v, want %v", c.why, got, c.want)
		}
	}
	n.Devices[0].Name = "MI300X"
	if !backendNodeMatches(n, "main", runPlacement{}, []hostNeeds{{Vendor: "amd"}}) {
		t.Error("an MI300X offer refuses vendor amd")
	}
	host := sched.Node{Name: "local-vm", Labels: map[string]string{backendLabel: "local", projectLabel: ""}}
	if backendNodeMatches(host, "main", runPlacement{}, nil) {
		t.Error("a host matched as backend capacity")
	}
}
