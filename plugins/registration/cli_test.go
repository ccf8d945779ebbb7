package registration

import (
	"context"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/internal/testutil"
)

// TestGpudAgentWithServerFlagRegisters runs the real `gpud agent --server
// URL --token T --server-ca CA` process: it registers over TLS, the server
// reads its fake GPUs through the tunnel, and with a revoked token the
// process exits non-zero saying the registration was refused.
func TestGpudAgentWithServerFlagRegisters(t *testing.T) {
	ac, tokens, srv, _ := testServer(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, id, err := tokens.Issue("metal")
	if err != nil {
		t.Fatal(err)
	}
	cmd, out := testutil.StartRegisteringAgent(t, os.Getenv(testutil.StaticGpudEnv), srv.URL, tok, ca, "8xH100:80GB")
	hostname, _ := os.Hostname()
	var a *Agent
	testutil.Eventually(t, 20*time.Second, func() error {
		if a = ac.Agent("metal", hostname); a == nil {
			return testutil.Errorf("not registered; agent output:\n%s", out)
		}
		return nil
	})
	c, err := client.New(BaseURL, a.Token, a.HTTPClient())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := c.Host(ctx)
	if err != nil || len(info.Accelerators.Devices) != 8 {
		t.Fatalf("host info through the tunnel: %d GPUs, %v", len(info.Accelerators.Devices), err)
	}
	if strings.Contains(out.String(), tok) {
		t.Error("the agent logged its registration token")
	}

	// Revoke: the connected agent is dropped and cannot come back.
	tokens.Revoke(id)
	ac.DropToken(id)
	testutil.WaitRegistrationRefused(t, cmd, out, 15*time.Second)
}
