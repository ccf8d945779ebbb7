package daemon

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestRegisteredAgentJoinsItsFleetUntilTheTokenIsRevoked runs the server
// with registration on and a real `gpud agent --server` process: a fleet
// token issued through the API lets it join as an instance (its fake
// GPUs read through the tunnel); revoking the token drops it and it exits
// refused, and the revoked token cannot register again.
func TestRegisteredAgentJoinsItsFleetUntilTheTokenIsRevoked(t *testing.T) {
	bin := staticGpud(t)
	ts := startServerWith(t, Options{Runtime: "process", RegistrationListen: "127.0.0.1:0"})
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply",
		api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: metal\nnodes: 0..4\n"}, nil)
	var tok api.RegistrationToken
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/fleets/metal/tokens", nil, &tok)
	ca := filepath.Join(ts.opts.DataDir, RegistrationCAFile)
	agent := func() (*exec.Cmd, *testutil.SyncBuffer) {
		return testutil.StartRegisteringAgent(t, bin, ts.RegistrationURL(), tok.Token, ca, "4xA100:40GB")
	}
	cmd, out := agent()
	testutil.Eventually(t, 30*time.Second, func() error {
		var fleet api.Fleet
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/fleets/metal", nil, &fleet)
		if len(fleet.Instances) != 1 || fleet.Instances[0].Backend != "registration" || fleet.Instances[0].Resources.GPUs != 4 {
			return testutil.Errorf("instances %+v; agent output:\n%s", fleet.Instances, out)
		}
		return nil
	})

	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/main/fleets/metal/tokens/"+tok.ID, nil, nil)
	testutil.WaitRegistrationRefused(t, cmd, out, 20*time.Second)
	cmd, out = agent()
	testutil.WaitRegistrationRefused(t, cmd, out, 20*time.Second)
	if _, err := os.Stat(ca); err != nil {
		t.Errorf("no CA file for agents: %v", err)
	}
}
