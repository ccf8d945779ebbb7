package daemon

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLocalAgentSocketFitsSunPathWhateverTheDataDir: with a data dir too
// long for sun_path the local agent still starts and runs jobs, its socket
// moved to a short private path (0700 directory, 0600 socket) under
// $XDG_RUNTIME_DIR or the temporary directory, removed at close; a short
// data dir keeps the socket inside it.
func TestLocalAgentSocketFitsSunPathWhateverTheDataDir(t *testing.T) {
	runtimeDir := t.TempDir()
	cases := []struct {
		name      string
		long      bool
		xdg       string
		wantUnder string
		wantMoved bool
	}{
		{"short data dir keeps the socket in it", false, runtimeDir, "", false},
		{"long data dir moves it under XDG_RUNTIME_DIR", true, runtimeDir, runtimeDir, true},
		{"long data dir without XDG_RUNTIME_DIR moves it under the temp dir", true, "", os.TempDir(), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("XDG_RUNTIME_DIR", c.xdg)
			dir := t.TempDir()
			if c.long {
				dir = filepath.Join(dir, strings.Repeat("a-very-long-directory-name-", 4), strings.Repeat("b", 100))
				if n := len(filepath.Join(dir, "agent", "agent.sock")); n <= 108 {
					t.Fatalf("the long data dir gives a %d-byte socket path, not over sun_path's 108", n)
				}
			}
			ts := startServerWith(t, Options{DataDir: dir, FakeGPUs: "1xH100:80GB", Runtime: "process"})
			sock := ts.hosts.local.socket
			if len(sock) > maxSocketPath {
				t.Fatalf("socket %s is %d bytes, over %d", sock, len(sock), maxSocketPath)
			}
			inDataDir := strings.HasPrefix(sock, dir+string(filepath.Separator))
			if inDataDir == c.wantMoved || (c.wantMoved && !strings.HasPrefix(sock, c.wantUnder+string(filepath.Separator))) {
				t.Fatalf("socket %s: moved %v, want moved %v (under %q)", sock, !inDataDir, c.wantMoved, c.wantUnder)
			}
			if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
				t.Fatalf("socket %s: %v %v, want a socket with mode 0600", sock, fi.Mode(), err)
			}
			if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
				t.Fatalf("socket dir: %v %v, want mode 0700", fi.Mode(), err)
			}
			name := "through-the-socket"
			ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply",
				yamlApply("type: task\nname: "+name+"\ncommands: [echo through-the-socket]\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n"), nil)
			if run := ts.waitRunEnd(name, 30*time.Second); run.Status != "done" {
				t.Fatalf("run through the local agent: %s (%s), want done", run.Status, run.Reason)
			}
			if err := ts.Close(); err != nil {
				t.Fatal(err)
			}
			gone := sock
			if c.wantMoved {
				gone = filepath.Dir(sock)
			}
			if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s after close: %v, want it removed", gone, err)
			}
		})
	}
}
