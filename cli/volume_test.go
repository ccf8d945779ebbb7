package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/daemon"
)

// gpud apply of a type: volume stores it; gpud volume list shows it (and
// --json its fields); gpud volume delete without -y and without a
// terminal deletes nothing; with -y it deletes, and an unknown name is a
// clear error.
func TestVolumeApplyListAndDelete(t *testing.T) {
	serveForCLI(t, daemon.Options{Runtime: "process"})
	file := filepath.Join(t.TempDir(), "vol.yml")
	if err := os.WriteFile(file, []byte("type: volume\nname: cache\nbackend: ssh\nauto_cleanup_duration: 1d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := mustRunCLI(t, "apply", file); !strings.Contains(out, "volume cache: submitted (backend ssh)") {
		t.Fatalf("apply: %q", out)
	}
	out := mustRunCLI(t, "volume", "list")
	for _, w := range []string{"NAME", "BACKEND", "HOST", "RUNS", "LAST USED", "cache", "ssh", "submitted", "24h0m0s"} {
		if !strings.Contains(out, w) {
			t.Errorf("volume list lacks %q:\n%s", w, out)
		}
	}
	var vs []api.Volume
	if err := json.Unmarshal([]byte(mustRunCLI(t, "volume", "list", "--json")), &vs); err != nil || len(vs) != 1 || vs[0].Name != "cache" || vs[0].Backend != "ssh" {
		t.Fatalf("volume list --json: %+v %v", vs, err)
	}
	if _, stderr, code := runCLI("volume", "delete", "cache"); code == 0 || !strings.Contains(stderr, "-y") {
		t.Fatalf("delete without -y and without a terminal: exit %d %q, want a refusal naming -y", code, stderr)
	}
	if out := mustRunCLI(t, "volume", "delete", "-y", "cache"); !strings.Contains(out, "volume cache deleted") {
		t.Fatalf("delete: %q", out)
	}
	if out := mustRunCLI(t, "volume", "list"); !strings.Contains(out, "no volumes") {
		t.Fatalf("list after delete: %q", out)
	}
	if _, stderr, code := runCLI("volume", "delete", "-y", "cache"); code == 0 || !strings.Contains(stderr, `volume "cache" not found`) {
		t.Fatalf("delete of a deleted volume: exit %d %q", code, stderr)
	}
}
