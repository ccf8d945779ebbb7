package testutil

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// SyncBuffer collects a process's output; the process may write to it
// while the test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p under the lock; it never fails.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// StartRegisteringAgent starts the real `bin agent --server url
// --server-ca ca` process, its registration token in GPUD_AGENT_TOKEN (as
// docs/fleets.md says, never on the command line), with a fresh data
// directory, the process runtime and fakeGPUs (e.g. "4xA100:40GB"). Its
// stdout and stderr go to the returned buffer; the process is killed when
// the test ends.
func StartRegisteringAgent(t testing.TB, bin, url, token, ca, fakeGPUs string) (*exec.Cmd, *SyncBuffer) {
	t.Helper()
	return RegisteringAgent{Bin: bin, URL: url, Token: token, CA: ca, FakeGPUs: fakeGPUs}.Start(t)
}

// RegisteringAgent is a `gpud agent --server` process to start: DataDir
// (default a fresh one) holds its host key, so two starts with one DataDir
// are the same host; Hostname, when set, is the name it registers under.
type RegisteringAgent struct {
	Bin, URL, Token, CA, FakeGPUs string
	DataDir, Hostname             string
	// Args are more flags, after the defaults (a later --runtime wins).
	Args []string
}

// Start starts the agent as StartRegisteringAgent does.
func (a RegisteringAgent) Start(t testing.TB) (*exec.Cmd, *SyncBuffer) {
	t.Helper()
	var out SyncBuffer
	if a.DataDir == "" {
		a.DataDir = t.TempDir()
	}
	args := []string{"agent", "--server", a.URL, "--server-ca", a.CA,
		"--data-dir", a.DataDir, "--runtime", "process", "--fake-gpus", a.FakeGPUs}
	if a.Hostname != "" {
		args = append(args, "--hostname", a.Hostname)
	}
	args = append(args, a.Args...)
	cmd := exec.Command(a.Bin, args...)
	cmd.Env = append(os.Environ(), "GPUD_AGENT_TOKEN="+a.Token)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dataDir := a.DataDir
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		KillJobsUnder(dataDir) // its jobs' shims outlive it by design
	})
	return cmd, &out
}

// WaitRegistrationRefused waits up to timeout for an agent started by
// StartRegisteringAgent to exit, and fails the test unless it exited
// non-zero saying its registration was refused.
func WaitRegistrationRefused(t testing.TB, cmd *exec.Cmd, out *SyncBuffer, timeout time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(out.String(), "registration refused") {
			t.Fatalf("agent exit %v; want non-zero with \"registration refused\", output:\n%s", err, out)
		}
	case <-time.After(timeout):
		t.Fatalf("agent still running with a revoked token after %v; output:\n%s", timeout, out)
	}
}
