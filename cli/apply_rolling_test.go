package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/internal/testutil"
)

// TestApplyOfAChangedServiceRollsItOut: gpud apply of a changed
// configuration to a running service (no --force) is a rolling update,
// and says so; without a change it is refused as before.
func TestApplyOfAChangedServiceRollsItOut(t *testing.T) {
	serveProcessJobsForCLI(t)
	file := filepath.Join(t.TempDir(), "web.yml")
	service := func(version string) string {
		return fmt.Sprintf(`type: service
name: web
port: 8000
env: [VERSION=%s]
commands: [sleep 300]
resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
`, version)
	}
	writeTestFile(t, file, service("v1"))
	mustRunCLI(t, "apply", file)
	testutil.Eventually(t, 60*time.Second, func() error {
		if out := mustRunCLI(t, "ps"); !strings.Contains(out, "running") {
			return fmt.Errorf("web is not running yet:\n%s", out)
		}
		return nil
	})
	if _, stderr, code := runCLI("apply", file); code == 0 || !strings.Contains(stderr, "force") {
		t.Errorf("apply of the same configuration: exit %d, %q; want a conflict naming --force", code, stderr)
	}
	writeTestFile(t, file, service("v2"))
	out := mustRunCLI(t, "apply", file)
	if !strings.Contains(out, "run web: running — rolling update to deployment 1 by admin: starting 1 replicas") {
		t.Errorf("apply of a changed configuration printed %q, want the rolling update", out)
	}
}
