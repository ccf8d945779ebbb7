package testutil

import (
	"os"
	"testing"
)

// NeedRoot skips a test that must run as root (switching a job to an
// unprivileged user) when it does not, saying why; under CI, which runs
// the suite as root, it fails instead, so a boundary test is never counted
// as passing without having run.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("needs root (%s), and CI is set: run the suite as root, as .ci/run does", why)
	}
	t.Skipf("needs root: %s (CI runs the tests as root)", why)
}
