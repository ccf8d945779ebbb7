package daemon

import (
	"testing"

	"gpud.dev/gpud/api"
)

// TestHostNeedsMatchPrivilegedAndPython: a host takes a privileged job
// only with its admin's opt-in, and a python job that it would run as a
// process only with that interpreter; a job in an image on a mixed host
// runs in Docker and needs none.
func TestHostNeedsMatchPrivilegedAndPython(t *testing.T) {
	for _, c := range []struct {
		name string
		info api.HostInfo
		need hostNeeds
		want bool
	}{
		{"privileged, no opt-in", api.HostInfo{Runtime: "docker"}, hostNeeds{Privileged: true}, false},
		{"privileged, opt-in", api.HostInfo{Runtime: "docker", AllowPrivileged: true}, hostNeeds{Privileged: true}, true},
		{"python on a process host without it", api.HostInfo{Runtime: "process", Pythons: []string{"3.10"}}, hostNeeds{Python: "3.11"}, false},
		{"python on a process host with it", api.HostInfo{Runtime: "process", Pythons: []string{"3.10", "3.11"}}, hostNeeds{Python: "3.11"}, true},
		{"python, image-less, mixed host without it", api.HostInfo{Runtime: mixedRuntime}, hostNeeds{Python: "3.11"}, false},
		{"python in an image, mixed host", api.HostInfo{Runtime: mixedRuntime}, hostNeeds{Python: "3.11", Image: true}, true},
		{"python on a Docker host", api.HostInfo{Runtime: "docker"}, hostNeeds{Python: "3.11"}, true},
	} {
		if got := needsMatch(c.info, c.need); got != c.want {
			t.Errorf("%s: needsMatch = %v, want %v", c.name, got, c.want)
		}
	}
}
