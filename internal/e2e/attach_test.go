package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/internal/testutil"
)

// TestAttachForwardsPortsToLocalhost runs a web server as a task (its port
// forwarded over TCP) and as a service (reached through the server's
// proxy), each on the process runtime, and fetches a page through attach.
func TestAttachForwardsPortsToLocalhost(t *testing.T) {
	s := startServer(t, "process")
	ctx := timeout(t, 2*time.Minute)
	// The process runtime of gpud serve runs jobs as nobody: the served
	// directory must be one that user can reach (not under a 0700 TempDir).
	www, err := os.MkdirTemp("", "gpud-e2e-www-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(www) })
	if err := os.Chmod(www, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(www, "index.html"), []byte("hello-through-attach\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		run    string
		config func(jobPort, localPort int) string
		args   func(localPort int) []string
	}{
		{name: "task port over TCP", run: "webtask", config: func(jobPort, localPort int) string {
			return fmt.Sprintf("type: task\nname: webtask\nports:\n  - %d:%d\ncommands:\n  - exec busybox httpd -f -p %d -h %s\nresources:\n  disk: 1GB..\n", localPort, jobPort, jobPort, www)
		}, args: func(int) []string { return []string{"attach", "webtask"} }},
		{name: "service through the server proxy", run: "websvc", config: func(jobPort, _ int) string {
			return fmt.Sprintf("type: service\nname: websvc\nport: %d\ncommands:\n  - exec busybox httpd -f -p %d -h %s\nresources:\n  disk: 1GB..\n", jobPort, jobPort, www)
		}, args: func(localPort int) []string { return []string{"attach", "--port", fmt.Sprint(localPort), "websvc"} }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobPort, localPort := testutil.FreePort(t), testutil.FreePort(t)
			path := writeConfig(t, s.cli.home, fmt.Sprintf("web%d.yml", i), tt.config(jobPort, localPort))
			submitted := s.cli.must(ctx, "run", "-y", "-d", path)
			if tt.run == "websvc" && !strings.Contains(submitted.stderr, s.url+"/proxy/services/main/websvc/") {
				t.Errorf("gpud run does not say where the service is reached:\n%s", submitted.stderr)
			}
			name := tt.run
			t.Cleanup(func() { s.cli.run(ctx, "stop", "--abort", name) })
			testutil.Eventually(t, time.Minute, func() error {
				if run, _ := s.runStatus(t, name); run.Status != "running" {
					return fmt.Errorf("run %s is %q", name, run.Status)
				}
				return nil
			})

			cmd := exec.CommandContext(ctx, gpudBin, tt.args(localPort)...)
			cmd.Dir, cmd.Env = repo, s.cli.env
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = io.Copy(io.Discard, bufio.NewReader(out)) }()
			t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })

			testutil.Eventually(t, 30*time.Second, func() error {
				resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", localPort))
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || !strings.Contains(string(b), "hello-through-attach") {
					return fmt.Errorf("status %d body %q", resp.StatusCode, b)
				}
				return nil
			})
		})
	}
}
