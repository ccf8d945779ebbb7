package daemon

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestMultiNodeGangStaysWithinOneFleet: a two-node task whose nodes would
// fit only by splitting across two fleets (one GPU on the local host, one
// on a host of fleet "other") waits; once "other" has a second host, both
// nodes are placed there.
func TestMultiNodeGangStaysWithinOneFleet(t *testing.T) {
	ts := startServer(t, "1xH100:80GB")
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply",
		api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: other\nnodes: 0..4\n"}, nil)
	local := ts.store.Instances().List()[0]
	st, err := instanceSpecOf(local)
	if err != nil {
		t.Fatal(err)
	}
	host := st.Host
	join := func(name string) {
		h := host
		h.Hostname = name
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/agents/heartbeat", api.Heartbeat{Instance: name, Fleet: "main/other", Host: h}, nil)
	}
	join("sim-a")
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply",
		yamlApply("type: task\nname: gang\nnodes: 2\ncommands: [sleep 300]\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n  gpu: 1\n"), nil)
	jobs := func() []api.Job {
		var run api.Run
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/gang", nil, &run)
		return run.Jobs
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		js := jobs()
		if len(js) != 2 || js[0].WhyPending == "" {
			return testutil.Errorf("jobs %+v, want two pending with a reason", js)
		}
		return nil
	})
	for _, j := range jobs() {
		if j.Instance != "" {
			t.Fatalf("job %s placed on %s across fleets", j.Name, j.Instance)
		}
	}
	join("sim-b")
	testutil.Eventually(t, 10*time.Second, func() error {
		js := jobs()
		if len(js) != 2 || js[0].Instance == "" || js[1].Instance == "" {
			return testutil.Errorf("jobs %+v, want both placed", js)
		}
		for _, j := range js {
			if !strings.HasPrefix(j.Instance, "sim-") {
				t.Fatalf("job %s placed on %s, want a host of fleet other", j.Name, j.Instance)
			}
		}
		return nil
	})
}
