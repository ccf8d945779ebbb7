package tunnel

import (
	"context"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
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
	// What every user sees in ps: the token is in the environment only.
	if argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); err != nil || strings.Contains(string(argv), tok) {
		t.Errorf("the agent's command line %q (%v) holds its registration token", argv, err)
	}

	// Revoke: the connected agent is dropped and cannot come back.
	tokens.Revoke(id)
	ac.DropToken(id)
	testutil.WaitRegistrationRefused(t, cmd, out, 15*time.Second)
}

// TestGpudAgentReadsItsTokenFromAFile: `gpud agent --server URL
// --token-file F` registers with the token in F, and the token is on no
// command line; a missing or empty file, or a token given twice, stops
// the agent at once with the fix.
func TestGpudAgentReadsItsTokenFromAFile(t *testing.T) {
	ac, tokens, srv, _ := testServer(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, _, err := tokens.Issue("metal")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file, empty := filepath.Join(dir, "token"), filepath.Join(dir, "empty")
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv(testutil.StaticGpudEnv)
	agent := func(env []string, args ...string) (*exec.Cmd, *testutil.SyncBuffer) {
		var out testutil.SyncBuffer
		cmd := exec.Command(bin, append([]string{"agent", "--server", srv.URL, "--server-ca", ca, "--data-dir", t.TempDir(),
			"--runtime", "process", "--fake-gpus", "1xA100:40GB", "--hostname", "file-host"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, &out
	}
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"missing file", nil, []string{"--token-file", filepath.Join(dir, "none")}, "--token-file"},
		{"empty file", nil, []string{"--token-file", empty}, "is empty"},
		{"token twice", []string{"GPUD_AGENT_TOKEN=" + tok}, []string{"--token-file", file}, "not both"},
	} {
		cmd, out := agent(tt.env, tt.args...)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(out.String(), tt.want) {
				t.Errorf("%s: exit %v, output %q; want a failure saying %q", tt.name, err, out, tt.want)
			}
		case <-time.After(eventWait):
			t.Errorf("%s: the agent kept running", tt.name)
		}
	}
	cmd, out := agent(nil, "--token-file", file)
	testutil.Eventually(t, 20*time.Second, func() error {
		if ac.Agent("metal", "file-host") == nil {
			return testutil.Errorf("not registered; agent output:\n%s", out)
		}
		return nil
	})
	if argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); err != nil || strings.Contains(string(argv), tok) {
		t.Errorf("command line %q (%v) holds the token", argv, err)
	}
}
