package cli

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestServiceKeyCommandsCreateListRevoke: gpud service key create prints
// a key that opens the service through the server's gateway (401 without
// it), list shows its name and never the key, revoke makes the next
// request with it 401.
func TestServiceKeyCommandsCreateListRevoke(t *testing.T) {
	srv := serveProcessJobsForCLI(t)
	// busybox's httpd as the replica, serving a page any user may read
	// (process jobs do not run as the test's user).
	site, err := os.MkdirTemp("", "gpud-site-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(site) })
	if err := os.Chmod(site, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(site, "index.html"), []byte("hello from web\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "web.yml")
	writeTestFile(t, file, fmt.Sprintf(`type: service
name: web
port: %[1]d
commands: [exec /usr/bin/busybox httpd -f -p 127.0.0.1:%[1]d -h %[2]s]
resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
`, port, site))
	mustRunCLI(t, "apply", file)

	get := func(auth string) (int, string) {
		req, err := http.NewRequest("GET", srv.URL()+"/proxy/services/main/web/index.html", nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	testutil.Eventually(t, 60*time.Second, func() error {
		if code, body := get(srv.AdminToken()); code != http.StatusOK || !strings.Contains(body, "hello from web") {
			return fmt.Errorf("web answers %d %q", code, body)
		}
		return nil
	})

	stdout, stderr, code := runCLI("service", "key", "create", "--name", "ci", "web")
	key := strings.TrimSpace(stdout)
	if code != 0 || !strings.HasPrefix(key, api.ServiceKeyPrefix) || strings.Contains(key, "\n") || !strings.Contains(stderr, "shown this once") {
		t.Fatalf("key create: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, body := get(key); code != http.StatusOK || !strings.Contains(body, "hello from web") {
		t.Errorf("with the key: %d %q", code, body)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("without the key: %d, want 401", code)
	}
	for _, args := range [][]string{{"service", "key", "list", "web"}, {"service", "key", "list", "--json", "web"}} {
		out := mustRunCLI(t, args...)
		if !strings.Contains(out, "ci") || strings.Contains(out, key) || strings.Contains(out, key[len(api.ServiceKeyPrefix):]) {
			t.Errorf("gpud %s: want ci without the key:\n%s", strings.Join(args, " "), out)
		}
	}
	if out := mustRunCLI(t, "service", "key", "create", "--json", "web"); !strings.Contains(out, `"key": "gpud_sk_`) {
		t.Errorf("key create --json: %s", out)
	}
	if _, stderr, code := runCLI("service", "key", "create", "--name", "ci", "web"); code == 0 || !strings.Contains(stderr, "already has a key named") {
		t.Errorf("a second ci: exit %d %q", code, stderr)
	}
	mustRunCLI(t, "service", "key", "revoke", "web", "ci")
	if code, _ := get(key); code != http.StatusUnauthorized {
		t.Errorf("a revoked key: %d, want 401", code)
	}
	if _, stderr, code := runCLI("service", "key", "revoke", "web", "ci"); code == 0 || !strings.Contains(stderr, "not found") {
		t.Errorf("revoking twice: exit %d %q", code, stderr)
	}
	if _, _, code := runCLI("service", "key", "revoke", "web"); code != exitUsage {
		t.Errorf("revoke without a name: exit %d, want %d", code, exitUsage)
	}
}
