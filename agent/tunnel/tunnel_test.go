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
		{"a token is required", refusing.URL, ca, "", "--server needs --token", false},
		{"a CA file without a certificate", refusing.URL, notPEM, "t", "no PEM certificate", false},
		{"a refused token ends the agent", refusing.URL, ca, "revoked", "registration token revoked", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cfg, err := NewConfig(tt.url, tt.ca, tt.token, "agent-token", h, zerolog.Nop())
			if err == nil {
				err = Serve(ctx, cfg)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrRejected) != tt.rejected {
				t.Fatalf("err = %v; want one containing %q (rejected: %v)", err, tt.want, tt.rejected)
			}
		})
	}
}
