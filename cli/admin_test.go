package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpud.dev/gpud/store"
)

// TestAdminBackupCheckRotateRestore drives `gpud admin` on a real state
// directory: back up, rotate the key, check, then restore the backup.
func TestAdminBackupCheckRotateRestore(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(filepath.Join(dir, "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Apply(ctx, store.Put(store.Record{Kind: store.KindProject, ID: "main"}),
		store.Put(store.Record{Kind: store.KindSecret, ID: "main/token", Project: "main", Sealed: []byte("admin-test-secret")})); err != nil {
		t.Fatal(err)
	}
	s.Close()
	backup := filepath.Join(dir, "backup.db")
	gpud := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(append([]string{"gpud", "admin"}, args...), &out, &errb)
		return out.String() + errb.String(), code
	}
	steps := []struct {
		name string
		args []string
		want string
	}{
		{"backup writes a snapshot", []string{"backup", "--data-dir", dir, backup}, "bytes written"},
		{"rotate-key re-encrypts the secret", []string{"rotate-key", "--data-dir", dir}, "1 values re-encrypted"},
		{"check finds nothing wrong", []string{"check", "--data-dir", dir}, "check: ok"},
		{"restore puts the backup back", []string{"restore", "--data-dir", dir, backup}, "restored"},
		{"check after restore", []string{"check", "--data-dir", dir}, "check: ok"},
	}
	for _, st := range steps {
		out, code := gpud(st.args...)
		if code != 0 || !strings.Contains(out, st.want) {
			t.Fatalf("%s: exit %d, output %q, want %q", st.name, code, out, st.want)
		}
	}
	// The restored file (sealed with the old key) still opens: the key file keeps every key.
	s, err = store.Open(filepath.Join(dir, "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if sec, err := s.Secrets().Get("main/token"); err != nil || string(sec.Sealed) != "admin-test-secret" {
		t.Fatalf("secret after restore: %q %v", sec.Sealed, err)
	}
	if _, code := gpud("backup", "--data-dir", filepath.Join(dir, "missing"), backup); code == 0 {
		t.Fatal("backup of a missing state file succeeded")
	}
	if _, err := os.Stat(backup); err != nil {
		t.Fatal(err)
	}
}
