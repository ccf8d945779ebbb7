package daemon

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestRegisteredFleetTakesNoMoreHostsThanNodesMax: a fleet's nodes
// maximum caps how many hosts register into it; a minimum gpud would have
// to provision is refused by name.
func TestRegisteredFleetTakesNoMoreHostsThanNodesMax(t *testing.T) {
	bin := staticGpud(t)
	ts := startServerWith(t, Options{Runtime: "process", RegistrationListen: "127.0.0.1:0"})
	status, se := ts.call(ts.admin, "POST", "/api/v1/projects/main/fleets/apply", api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: cloud\nnodes: 2\n", Filename: "cloud.yml"}, nil)
	if status != http.StatusUnprocessableEntity || se.Code != api.CodeNotHonoured || !strings.HasPrefix(se.Message, "cloud.yml:3:1: nodes: ") {
		t.Errorf("a fleet gpud would have to provision: %d %s %q", status, se.Code, se.Message)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply",
		api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: metal\nnodes: 0..1\n"}, nil)
	var tok api.RegistrationToken
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/fleets/metal/tokens", nil, &tok)
	ca := filepath.Join(ts.opts.DataDir, RegistrationCAFile)
	start := func(host string) *testutil.SyncBuffer {
		_, out := testutil.RegisteringAgent{Bin: bin, URL: ts.RegistrationURL(), Token: tok.Token, CA: ca, FakeGPUs: "1xA100:40GB", Hostname: host}.Start(t)
		return out
	}
	instances := func() []api.Instance {
		var fleet api.Fleet
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/fleets/metal", nil, &fleet)
		return fleet.Instances
	}
	first := start("first")
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := len(instances()); n != 1 {
			return fmt.Errorf("%d instances; agent output:\n%s", n, first)
		}
		return nil
	})
	second := start("second")
	// The second host is turned away, again and again, and never becomes
	// an instance: wait for the refusal in the server's answer to it.
	testutil.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(second.String(), "nodes maximum") && len(instances()) == 1 {
			return fmt.Errorf("the second agent was not refused yet:\n%s", second)
		}
		return nil
	})
	if got := instances(); len(got) != 1 || !strings.Contains(got[0].Name, "first") {
		t.Errorf("instances after a second host tried: %+v", got)
	}
}
