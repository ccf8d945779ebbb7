package agent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestOpenRuntime(t *testing.T) {
	tests := []struct {
		name       string
		kind       string
		dockerHost string
		want       string
		wantErr    bool
		logs       string
	}{
		{"auto falls back to processes when Docker is unreachable, and says so", RuntimeAuto, "unix:///nonexistent/docker.sock", "process", false, "falling back to the process runtime"},
		{"docker demanded but unreachable is an error", RuntimeDocker, "unix:///nonexistent/docker.sock", "", true, ""},
		{"process never touches Docker", RuntimeProcess, "unix:///nonexistent/docker.sock", "process", false, ""},
		{"an unknown kind is an error", "podman", "unix:///nonexistent/docker.sock", "", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DOCKER_HOST", tt.dockerHost)
			var logs bytes.Buffer
			rt, info, err := OpenRuntime(context.Background(), RuntimeOptions{Kind: tt.kind, DataDir: t.TempDir(), Logger: zerolog.New(&logs)})
			if tt.wantErr {
				if err == nil {
					t.Fatalf("opened %s, want an error", rt.Name())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			if rt.Name() != tt.want || info.Usable {
				t.Fatalf("runtime %s, docker %+v", rt.Name(), info)
			}
			if !strings.Contains(logs.String(), tt.logs) {
				t.Fatalf("logs %q lack %q", logs.String(), tt.logs)
			}
		})
	}
}

func TestTokenIsCreatedOnceWithMode0600(t *testing.T) {
	dir := t.TempDir()
	first, err := LoadOrCreateToken(dir)
	if err != nil || len(first) != 64 {
		t.Fatalf("token %q, %v", first, err)
	}
	again, err := LoadOrCreateToken(dir)
	if err != nil || again != first {
		t.Fatalf("second load = %q, %v; want the same token", again, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "token")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode = %v, %v", fi.Mode(), err)
	}
}

// A server that is not root cannot run jobs as another user: it refuses
// the process runtime with the choices unless the admin accepted that jobs
// run as its own user; a root one never runs them as root.
func TestProcessRunAsNeverGivesJobsTheServersPrivileges(t *testing.T) {
	if _, err := processRunAs("", false, 1000); err == nil || !strings.Contains(err.Error(), "--process-as-server-user") || !strings.Contains(err.Error(), "--runtime docker") {
		t.Fatalf("non-root server without the opt-out: %v, want a refusal naming the choices", err)
	}
	if u, err := processRunAs("", true, 1000); err != nil || u != "" {
		t.Fatalf("non-root with the opt-out: %q, %v; want the own user", u, err)
	}
	if u, err := processRunAs("", false, 0); err != nil || u != DefaultProcessUser {
		t.Fatalf("root: %q, %v; want %s", u, err, DefaultProcessUser)
	}
	for _, root := range []string{"root", "0", "0:0"} {
		if _, err := processRunAs(root, false, 0); err == nil {
			t.Fatalf("--process-user %s accepted", root)
		}
	}
}
