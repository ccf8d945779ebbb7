package plugins

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// buildTestPlugin builds plugins/internal/testplugin, a separate main
// package, as gpud-backend-test in a fresh plugin directory (with link
// flags ldflags), and returns the directory.
func buildTestPlugin(t testing.TB, ldflags string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", filepath.Join(dir, ExternalPrefix+"test"), "./internal/testplugin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the test plugin: %v\n%s", err, out)
	}
	return dir
}

// syncBuffer is a log sink read while plugins write to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testConfig is the test backend's configuration with a valid kubeconfig.
func testConfig(t testing.TB) []byte {
	t.Helper()
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []byte(`{"kubeconfig":"` + kc + `","state_dir":"` + filepath.Join(dir, "engine") + `","token":"s3cret-token"}`)
}

func startTest(t testing.TB, dir string, config []byte, opts SupervisorOptions) (*Supervisor, error) {
	t.Helper()
	exts, err := Discover(dir)
	if err != nil || len(exts) != 1 || exts[0].Type != "test" || exts[0].Refused != nil {
		t.Fatalf("discover %s: %v %+v", dir, err, exts)
	}
	sup, err := Start(context.Background(), Launch{Name: "default/test", Command: []string{exts[0].Path}, Config: config}, opts)
	if err == nil {
		t.Cleanup(sup.Close)
	}
	return sup, err
}

func TestExternalPluginServesTheBackendProtocol(t *testing.T) {
	dir := buildTestPlugin(t, "")
	logs := &syncBuffer{}
	sup, err := startTest(t, dir, testConfig(t), SupervisorOptions{Log: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	info, err := sup.Info(ctx)
	if err != nil || info.Type != "test" || info.Protocol != ProtocolVersion || info.Version != "0.1.0-test" || !info.Jobs {
		t.Fatalf("info: %+v %v", info, err)
	}
	if err := sup.Check(ctx); err != nil {
		t.Fatalf("check: %v", err)
	}
	offers, err := sup.Offers(ctx, OfferQuery{GPUName: "A100"})
	if err != nil || len(offers) != 1 || offers[0].Price != 12 || offers[0].Region != "test-1" {
		t.Fatalf("offers: %+v %v", offers, err)
	}
	gang := Gang{ID: "run-1/0", Project: "default", Jobs: []api.JobSpec{{ID: "job-a"}, {ID: "job-b"}}}
	if err := sup.StartGang(ctx, gang); err != nil {
		t.Fatal(err)
	}
	gangs, err := ReadGangs(ctx, sup)
	if err != nil || len(gangs["run-1_0"]) != 2 || gangs["run-1_0"][1].ID != "job-b" {
		t.Fatalf("gangs: %+v %v", gangs, err)
	}
	var lines []string
	if err := sup.Logs(ctx, "job-a", false, func(e api.JobLogEntry) error { lines = append(lines, e.Line); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(lines, "|") != "job-a line 0|job-a line 1|job-a line 2" {
		t.Fatalf("logs: %q", lines)
	}
	if _, err := sup.CreateInstance(ctx, InstanceRequest{ID: "i"}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("create instance: %v, want ErrUnsupported", err)
	}
	// The plugin's stderr reaches the server's log under the plugin's name;
	// its credentials do not.
	testutil.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), `"plugin":"default/test"`) || !strings.Contains(logs.String(), "test backend configured") {
			return fmt.Errorf("the plugin's log line is not in the server's log: %s", logs)
		}
		return nil
	})
	if strings.Contains(logs.String(), "s3cret-token") {
		t.Fatalf("the backend's token reached the log: %s", logs)
	}
}

func TestPluginOfAnotherProtocolVersionIsRefused(t *testing.T) {
	dir := buildTestPlugin(t, "-X main.protocol=2")
	_, err := startTest(t, dir, testConfig(t), SupervisorOptions{})
	var ve *VersionError
	if !errors.As(err, &ve) || ve.PluginVersion != 2 || ve.ServerVersion != ProtocolVersion {
		t.Fatalf("start: %v, want a VersionError naming 2 and %d", err, ProtocolVersion)
	}
	for _, want := range []string{"gpud-backend-test", "protocol version 2", "speaks version 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestBadBackendConfigurationIsRefusedNamingTheField(t *testing.T) {
	dir := buildTestPlugin(t, "")
	if _, err := startTest(t, dir, []byte(`{"state_dir":"/tmp/x"}`), SupervisorOptions{}); err == nil || !strings.Contains(err.Error(), "kubeconfig: required") {
		t.Fatalf("start without kubeconfig: %v", err)
	}
	sup, err := startTest(t, dir, []byte(`{"kubeconfig":"/nonexistent/kubeconfig","state_dir":"`+t.TempDir()+`"}`), SupervisorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "kubeconfig: open /nonexistent/kubeconfig") {
		t.Fatalf("check with a missing kubeconfig: %v", err)
	}
}

func TestCrashedPluginIsRestartedAndItsGangsReRead(t *testing.T) {
	dir := buildTestPlugin(t, "")
	reread := make(chan map[string][]api.JobStatus, 1)
	sup, err := startTest(t, dir, testConfig(t), SupervisorOptions{MinBackoff: 50 * time.Millisecond,
		OnRestart: func(g map[string][]api.JobStatus) { reread <- g }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := sup.StartGang(ctx, Gang{ID: "run-2", Jobs: []api.JobSpec{{ID: "j0"}}}); err != nil {
		t.Fatal(err)
	}
	pid := sup.State().Pid
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-reread:
		if len(g["run-2"]) != 1 || g["run-2"][0].ID != "j0" {
			t.Fatalf("re-read after the restart: %+v", g)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no restart; state %+v", sup.State())
	}
	st := sup.State()
	if st.State != StateRunning || st.Restarts != 1 || st.Pid == pid || st.Pid == 0 || !strings.Contains(st.LastError, "exited") {
		t.Fatalf("state after the restart: %+v", st)
	}
	// Calls reach the new process, and the work is intact.
	if jobs, err := sup.Status(ctx, "run-2"); err != nil || len(jobs) != 1 {
		t.Fatalf("status after the restart: %+v %v", jobs, err)
	}
}

func TestDiscoverRefusesPluginsOthersCanWrite(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"gpud-backend-ok": 0o755, "gpud-backend-open": 0o777, "gpud-backend-group": 0o775, "other": 0o755} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	exts, err := Discover(dir)
	if err != nil || len(exts) != 3 {
		t.Fatalf("discover: %+v %v", exts, err)
	}
	for _, e := range exts {
		if (e.Type == "ok") != (e.Refused == nil) {
			t.Errorf("%s: refused %v", e.Type, e.Refused)
		}
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	exts, err = Discover(dir)
	if err != nil || exts[1].Type != "ok" || exts[1].Refused == nil || !strings.Contains(exts[1].Refused.Error(), "writable by group or others") {
		t.Fatalf("a plugin in a directory anyone can write: %+v %v", exts, err)
	}
}
