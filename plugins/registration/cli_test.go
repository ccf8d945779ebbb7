package registration

import (
	"bytes"
	"context"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/internal/testutil"
)

// lockedBuffer collects a process's output safely.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

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
	start := func(t *testing.T) (*exec.Cmd, *lockedBuffer) {
		var out lockedBuffer
		cmd := exec.Command(os.Getenv(testutil.StaticGpudEnv), "agent", "--server", srv.URL, "--token", tok, "--server-ca", ca,
			"--data-dir", t.TempDir(), "--runtime", "process", "--fake-gpus", "8xH100:80GB")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd, &out
	}
	cmd, out := start(t)
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
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(out.String(), "registration refused") {
			t.Fatalf("agent exit %v after revocation; output:\n%s", err, out)
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("agent still running after its token was revoked; output:\n%s", out)
	}
}
