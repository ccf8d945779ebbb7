package tunnel

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestServeRefusesWhatCannotRegister is the agent side's table: settings
// that can never register fail at once with the fix, and a server that
// answers 401 ends Serve with ErrRejected instead of a retry loop.
func TestServeRefusesWhatCannotRegister(t *testing.T) {
	refusing := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != ConnectPath || r.Header.Get("Upgrade") != Protocol || r.Header.Get("Authorization") != "Bearer revoked" {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		http.Error(w, "registration token revoked", http.StatusUnauthorized)
	}))
	defer refusing.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: refusing.Certificate().Raw}), 0o644)
	notPEM := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o644)
	h := http.NotFoundHandler()
	tests := []struct {
		name     string
		url, ca  string
		token    string
		want     string
		rejected bool
	}{
		{"plain http is refused", "http://127.0.0.1:1", "", "t", "registration always runs over TLS", false},
		{"a token is required", refusing.URL, ca, "", "set GPUD_AGENT_TOKEN or --token-file", false},
		{"a CA file without a certificate", refusing.URL, notPEM, "t", "no PEM certificate", false},
		{"a refused token ends the agent", refusing.URL, ca, "revoked", "registration token revoked", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cfg, err := NewConfig(Flags{Server: tt.url, ServerCA: tt.ca, Token: tt.token, DataDir: t.TempDir()}, "agent-token", h, zerolog.Nop())
			if err == nil {
				err = Serve(ctx, cfg)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrRejected) != tt.rejected {
				t.Fatalf("err = %v; want one containing %q (rejected: %v)", err, tt.want, tt.rejected)
			}
		})
	}
}

// TestHostKeyIsKeptPrivateAndStable: the first start makes the host key
// with mode 0600, later starts present the same key (so the server knows
// the host again), and a key file others can read is refused with the fix.
func TestHostKeyIsKeptPrivateAndStable(t *testing.T) {
	dir := t.TempDir()
	first, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	again, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if Fingerprint(first.Leaf) != Fingerprint(again.Leaf) {
		t.Error("a restarted agent presents another key")
	}
	other, err := LoadOrCreateKey(t.TempDir())
	if err != nil || Fingerprint(other.Leaf) == Fingerprint(first.Leaf) {
		t.Errorf("two data dirs share a key (%v)", err)
	}
	if err := os.Chmod(filepath.Join(dir, KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable key: %v; want a refusal naming chmod 600", err)
	}
}
