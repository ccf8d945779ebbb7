package daemon

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// TestServerSealsStateWithTheKeyFromTheEnvironment: a server given a key
// (through Options.StateKey or $GPUD_STATE_KEY, as `gpud admin` reads it)
// seals its secrets with that key, writes no key file, and the state
// opens with the key and not without it.
func TestServerSealsStateWithTheKeyFromTheEnvironment(t *testing.T) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	key := base64.StdEncoding.EncodeToString(raw)
	cases := []struct {
		name    string
		env     string
		options string
	}{
		{"key in GPUD_STATE_KEY", key, ""},
		{"key in Options.StateKey", "", key},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(StateKeyEnv, c.env)
			dir := t.TempDir()
			ts := startServerWith(t, Options{DataDir: dir, Runtime: "process", StateKey: c.options})
			ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/secrets/db", api.SetSecretRequest{Value: "hunter2"}, nil)
			if err := ts.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, "state.key")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("state.key: %v, want no key file when the key is given", err)
			}
			st, err := store.Open(filepath.Join(dir, "state.db"), store.Options{KeyEnv: key})
			if err != nil {
				t.Fatalf("reopen with the key: %v", err)
			}
			if _, err := st.Secrets().Get("main/db"); err != nil {
				t.Fatalf("secret with the key: %v", err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if st, err := store.Open(filepath.Join(dir, "state.db"), store.Options{}); err == nil {
				_ = st.Close()
				t.Fatal("the state opened without its key")
			}
		})
	}
	t.Run("malformed key fails the start", func(t *testing.T) {
		t.Setenv(StateKeyEnv, "not-base64-of-32-bytes")
		srv, err := New(context.Background(), Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Runtime: "process", NoLocalAgent: true})
		if err == nil {
			_ = srv.Close()
			t.Fatal("New accepted a malformed state key")
		}
		if !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("err = %v, want store.ErrInvalid", err)
		}
	})
}
