package daemon

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/sched"
)

// applyFleet applies a fleet configuration to project and returns the
// status and the error answer.
func (ts *testServer) applyFleet(project, yaml string) (int, api.ServerError) {
	return ts.call(ts.admin, "POST", "/api/v1/projects/"+project+"/fleets/apply", api.ApplyRequest{ConfigurationYAML: yaml, Filename: "fleet.yml"}, nil)
}

func (ts *testServer) getFleet(name string) api.Fleet {
	var f api.Fleet
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/fleets/"+name, nil, &f)
	return f
}

// TestBackendFleetPlacesRunsOnItsBackendsWithinItsNodesMax: a backend
// fleet `backends: [test], nodes: 0..2` over the real test plugin (an
// external go-plugin subprocess whose jobs are local processes): the plan
// of a run with `fleets: [bf]` shows the backend's offer through the
// fleet; a 2-node task in the fleet runs there as one gang and holds 2 of
// its 2 nodes (fleet get); a third node, a 1-node task in the fleet, waits
// with a reason naming the fleet and its max, while a run that names no
// fleet still runs on the backend directly; the fleet cannot be deleted
// while its runs are active; once the 2-node task ends, the third runs.
func TestBackendFleetPlacesRunsOnItsBackendsWithinItsNodesMax(t *testing.T) {
	ts := startBackendServer(t, 8)
	if code, e := ts.applyFleet("main", "type: fleet\nname: bf\nbackends: [test]\nnodes: 0..2\n"); code != http.StatusOK {
		t.Fatalf("apply the backend fleet: %d %v", code, e)
	}
	f := ts.getFleet("bf")
	if len(f.Backends) != 1 || f.Backends[0].Name != "test" || len(f.Backends[0].Selects) != 1 || f.Backends[0].Selects[0] != "lab" ||
		f.Nodes == nil || f.Nodes.InUse != 0 || f.Nodes.Max == nil || *f.Nodes.Max != 2 || f.Status != "active" {
		t.Fatalf("fleet bf: %+v (nodes %+v)", f, f.Nodes)
	}
	gate := filepath.Join(t.TempDir(), "go")
	two := fmt.Sprintf("type: task\nname: two\nnodes: 2\nfleets: [bf]\ncommands:\n  - echo rank $DSTACK_NODE_RANK of $DSTACK_NODES_NUM\n  - while [ ! -f %s ]; do sleep 0.1; done\nresources:\n  gpu: A100:1\n", gate)
	var plan api.RunPlan
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(two), &plan)
	if len(plan.Offers) != 1 || plan.Offers[0].Backend != "lab" || plan.Offers[0].Fleet != "bf" || plan.Offers[0].Price != 12 {
		t.Fatalf("the plan of a run in fleet bf offers %+v", plan.Offers)
	}
	ts.submit(two)
	r := ts.waitRun("two", "running", "", time.Minute)
	for _, j := range r.Jobs {
		if !strings.HasPrefix(j.Instance, "backend:main/lab/") {
			t.Fatalf("job of fleet bf on %q", j.Instance)
		}
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		logs := ts.logText("two")
		if !strings.Contains(logs, "rank 0 of 2") || !strings.Contains(logs, "rank 1 of 2") {
			return fmt.Errorf("logs: %q", logs)
		}
		return nil
	})
	if f := ts.getFleet("bf"); f.Nodes == nil || f.Nodes.InUse != 2 {
		t.Fatalf("fleet bf holds %+v nodes, want 2", f.Nodes)
	}
	// The third node waits: the backend has room (8 GPUs), the fleet not.
	ts.submit("type: task\nname: three\nfleets: [bf]\ncommands: [echo third]\nresources:\n  gpu: A100:1\n")
	testutil.Eventually(t, 30*time.Second, func() error {
		r := ts.getRun("three")
		if r.Status != "pending" || !strings.Contains(r.WhyPending, `fleet "bf" below its nodes max 2`) {
			return fmt.Errorf("three: %s, why pending %q", r.Status, r.WhyPending)
		}
		return nil
	})
	t.Logf("three waits: %s", ts.getRun("three").WhyPending)
	// A run that names no fleet uses the backend as capacity of its own.
	ts.submit("type: task\nname: free\ncommands: [echo free]\nresources:\n  gpu: A100:1\n")
	ts.waitRun("free", "done", "", time.Minute)
	if r := ts.getRun("three"); r.Status != "pending" {
		t.Fatalf("three is %s while fleet bf is full", r.Status)
	}
	code, e := ts.call(ts.admin, "DELETE", "/api/v1/projects/main/fleets/bf", nil, nil)
	if code != http.StatusConflict || !strings.Contains(e.Message, "three") || !strings.Contains(e.Message, "two") {
		t.Fatalf("delete of a fleet its runs use: %d %v", code, e)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ts.waitRun("two", "done", "", time.Minute)
	r = ts.waitRun("three", "done", "", time.Minute)
	if !strings.HasPrefix(r.Jobs[0].Instance, "backend:main/lab/") {
		t.Fatalf("three ran on %q", r.Jobs[0].Instance)
	}
	if f := ts.getFleet("bf"); f.Nodes == nil || f.Nodes.InUse != 0 {
		t.Fatalf("after its runs fleet bf holds %+v nodes", f.Nodes)
	}
	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/main/fleets/bf", nil, nil)
}

// TestBackendFleetApplyChecksItsBackendsAndReportsADeletedOne attacks and
// misuses a backend fleet's fields: backends the project does not have
// (another project's included), gpud's own host kinds, a minimum of nodes
// job backends cannot keep, ssh_config beside backends, and a run naming
// two backend fleets are refused by field; deleting the backend a fleet
// names is allowed (it runs nothing), and the fleet then says it has no
// backend, and a run naming only it is refused at plan time.
func TestBackendFleetApplyChecksItsBackendsAndReportsADeletedOne(t *testing.T) {
	ts := startBackendServer(t, 8)
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	for _, c := range []struct {
		project, yaml string
		status        int
		want          string
	}{
		{"main", "type: fleet\nname: x\nbackends: [nope]\nnodes: 0..2\n", http.StatusBadRequest, `no backend of type or name "nope" in project "main"; its backends are lab (test)`},
		{"other", "type: fleet\nname: x\nbackends: [lab]\nnodes: 0..2\n", http.StatusBadRequest, `no backend of type or name "lab" in project "other"`},
		{"other", "type: fleet\nname: x\nbackends: [test]\nnodes: 0..2\n", http.StatusBadRequest, `no backend of type or name "test" in project "other"`},
		{"main", "type: fleet\nname: x\nbackends: [ssh]\nnodes: 0..2\n", http.StatusBadRequest, "names gpud's own hosts"},
		{"main", "type: fleet\nname: x\nbackends: [test]\nnodes: 2\n", http.StatusUnprocessableEntity, "job backends create no machines"},
		{"main", "type: fleet\nname: x\nbackends: [test]\nnodes: {min: 0, target: 1, max: 2}\n", http.StatusUnprocessableEntity, "without an instance backend (aws)"},
		{"main", "type: fleet\nname: x\nbackends: [test]\nssh_config:\n  user: u\n  identity_file: /k\n  hosts: [h]\n", http.StatusUnprocessableEntity, "cannot be both"},
	} {
		code, e := ts.applyFleet(c.project, c.yaml)
		if msg := e.Message + "\n" + strings.Join(e.Errors, "\n"); code != c.status || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q: %d %s, want %d %q", c.project, c.yaml, code, msg, c.status, c.want)
		}
		if code == http.StatusBadRequest && e.Field != "configuration.backends[0]" {
			t.Errorf("%q: field %q", c.yaml, e.Field)
		}
	}
	for _, y := range []string{"type: fleet\nname: bf\nbackends: [lab]\nnodes: 0..1\n", "type: fleet\nname: bf2\nbackends: [test]\nnodes: {max: 3}\n"} {
		if code, e := ts.applyFleet("main", y); code != http.StatusOK {
			t.Fatalf("%q: %d %v", y, code, e)
		}
	}
	plan := func(project, yaml string) (int, string) {
		code, e := ts.call(ts.admin, "POST", "/api/v1/projects/"+project+"/runs/plan", yamlApply(yaml), nil)
		return code, e.Message + "\n" + strings.Join(e.Errors, "\n")
	}
	if code, msg := plan("main", "type: task\nname: r\nfleets: [bf, bf2]\ncommands: [true]\n"); code != http.StatusUnprocessableEntity || !strings.Contains(msg, "are all backend fleets") {
		t.Errorf("a run naming two backend fleets: %d %s", code, msg)
	}
	if code, msg := plan("other", "type: task\nname: r\nfleets: [bf]\ncommands: [true]\n"); code != http.StatusUnprocessableEntity || !strings.Contains(msg, `no fleet of project "other"`) {
		t.Errorf("another project's run naming main's backend fleet: %d %s", code, msg)
	}
	if code, msg := plan("main", "type: dev-environment\nname: d\nfleets: [bf]\nide: vscode\n"); code != http.StatusUnprocessableEntity || !strings.Contains(msg, "runs on hosts only") {
		t.Errorf("a dev environment in a backend fleet: %d %s", code, msg)
	}
	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/main/backends/lab", nil, nil)
	f := ts.getFleet("bf")
	if f.Status != "no backend" || len(f.Backends) != 1 || len(f.Backends[0].Selects) != 0 || !strings.Contains(f.Backends[0].Reason, `no backend of type or name "lab"`) {
		t.Fatalf("fleet bf after its backend was deleted: %+v", f)
	}
	if code, msg := plan("main", "type: task\nname: r\nfleets: [bf]\ncommands: [true]\n"); code != http.StatusUnprocessableEntity || !strings.Contains(msg, "has no such backend now") {
		t.Errorf("a run naming a fleet without backends: %d %s", code, msg)
	}
}

// TestBackendFleetLabelSelectsCapacity: a backend capacity node carrying
// a backend fleet's label takes the runs that name the fleet (alone or
// beside host fleets), of its own project only; one without the label,
// no run that names fleets.
func TestBackendFleetLabelSelectsCapacity(t *testing.T) {
	n := sched.Node{Name: backendNodeName("main", "lab", "x"), Labels: map[string]string{backendLabel: jobBackendLabel, projectLabel: "main",
		backendTypeLabel: "test", backendNameLabel: "lab", fleetNodeLabel("bf"): "yes"}}
	for _, c := range []struct {
		project string
		fleets  []string
		want    bool
	}{
		{"main", []string{"bf"}, true},
		{"main", []string{"hosts", "bf"}, true},
		{"main", []string{"hosts"}, false},
		{"other", []string{"bf"}, false},
	} {
		if got := backendNodeMatches(n, c.project, runPlacement{Fleets: c.fleets}, nil); got != c.want {
			t.Errorf("%s %v: %v, want %v", c.project, c.fleets, got, c.want)
		}
	}
	bf := backendFleet{project: "main", name: "bf", backends: []string{"kubernetes", "lab"}}
	if !bf.takes("main", "test", "Lab") || !bf.takes("main", "Kubernetes", "k8s") || bf.takes("other", "kubernetes", "k8s") || bf.takes("main", "test", "lab2") {
		t.Error("a backend fleet takes the backends it names, by type or name, in its own project only")
	}
}
