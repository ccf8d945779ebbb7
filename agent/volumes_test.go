package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
)

// The agent's own check, whatever the server sent: prefixes allow, data
// dirs and escapes never do (not even optional ones), an optional volume
// the prefixes do not allow is left out, a missing directory is made.
func TestVolumePolicyMountsOnlyWhatTheAdminAllows(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "allowed", "agent-data")
	p, err := NewVolumePolicy([]string{filepath.Join(root, "allowed")}, []string{data})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(root, "allowed", "out")); err != nil {
		t.Fatal(err)
	}
	ok := filepath.Join(root, "allowed", "cache", "a")
	for _, c := range []struct {
		host      string
		optional  bool
		want      string // "" ok, "skip" left out, else a word of the error
		forbidden bool
	}{
		{ok, false, "", false},
		{filepath.Join(root, "elsewhere"), false, "not under a directory", false},
		{filepath.Join(root, "elsewhere"), true, "skip", false},
		{data, true, "data dir", true},
		{filepath.Join(data, "jobs"), false, "data dir", true},
		{root, false, "data dir", true}, // holds it
		{"/", true, "root directory", true},
		{root + "/allowed/../elsewhere", true, "`..`", true},
		{filepath.Join(root, "allowed", "out", "x"), true, "leads to /etc/x", true},
		{"relative/path", true, "absolute", true},
	} {
		spec := api.JobSpec{ID: "j", Volumes: []api.JobVolume{{HostPath: c.host, Path: "/v", Optional: c.optional}}}
		got, err := p.Prepare(spec, zerolog.Nop())
		switch {
		case c.want == "":
			if err != nil || len(got.Volumes) != 1 {
				t.Errorf("%s: %v %+v, want it mounted", c.host, err, got.Volumes)
			}
		case c.want == "skip":
			if err != nil || len(got.Volumes) != 0 {
				t.Errorf("%s optional: %v %+v, want it left out", c.host, err, got.Volumes)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrVolumeForbidden) != c.forbidden {
				t.Errorf("%s: %v, want an error with %q (forbidden on every host: %v)", c.host, err, c.want, c.forbidden)
			}
		}
	}
	fi, err := os.Stat(ok)
	if err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("the missing volume directory was not made 0777: %v %v", fi, err)
	}
	if _, err := os.Stat("/etc/x"); !os.IsNotExist(err) {
		t.Errorf("a directory was made through the symlink: %v", err)
	}
	if _, err := NewVolumePolicy([]string{"data"}, nil); err == nil {
		t.Error("a relative prefix was accepted")
	}
	if _, err := NewVolumePolicy([]string{"/data/../etc"}, nil); err == nil {
		t.Error("a prefix with .. was accepted")
	}
}
