package daemon

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// syncBuffer collects a process's output safely.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

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
	agent := func() (*exec.Cmd, *syncBuffer) {
		var out syncBuffer
		cmd := exec.Command(bin, "agent", "--server", ts.RegistrationURL(), "--token", tok.Token, "--server-ca", ca,
			"--data-dir", t.TempDir(), "--runtime", "process", "--fake-gpus", "4xA100:40GB")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd, &out
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
	exited := func(cmd *exec.Cmd, out *syncBuffer) {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(out.String(), "registration refused") {
				t.Fatalf("agent exit %v; want refused, output:\n%s", err, out)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("agent still running with a revoked token; output:\n%s", out)
		}
	}
	exited(cmd, out)
	exited(agent())
	if _, err := os.Stat(ca); err != nil {
		t.Errorf("no CA file for agents: %v", err)
	}
}
