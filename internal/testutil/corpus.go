package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// DstackExamples returns the shared dstack compatibility corpus
// (../shared/dstack-examples from the repository root), given the path
// from the calling package's directory to the repository root. A clone
// without it skips the test, naming the folder; under CI it fails.
func DstackExamples(t testing.TB, toRoot string) string {
	t.Helper()
	dir := filepath.Join(toRoot, "..", "shared", "dstack-examples")
	if _, err := os.Stat(dir); err != nil {
		abs, _ := filepath.Abs(dir)
		if os.Getenv("CI") != "" {
			t.Fatalf("the dstack compatibility corpus must exist at %s under CI: %v", abs, err)
		}
		t.Skipf("the dstack compatibility corpus %s is missing (a clone without ../shared): skipped", abs)
	}
	return dir
}
