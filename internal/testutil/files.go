package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFiles writes each name (slash-separated, relative) -> content
// under root, making the directories it needs.
func WriteFiles(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
