package api

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

const dstackProfiles = `profiles:
  - name: cheap
    default: true
    spot_policy: auto
    max_price: 1.5
    backends: [aws]
    retry: true
  - name: large
    max_duration: 2d
    regions: [us-east-1]
    tags: {team: ml}
`

const gpudProfiles = `profiles:
  - name: large
    queue: research
    priority: train
    backends: [gcp]
`

func TestProfilesMergeIntoRunsAsDefaults(t *testing.T) {
	project, home := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(project, ".dstack", "profiles.yml"), dstackProfiles)
	writeFile(t, filepath.Join(project, ".gpud", "profiles.yml"), gpudProfiles)
	writeFile(t, filepath.Join(home, ".dstack", "profiles.yml"), "profiles:\n  - name: home-only\n    regions: [eu-west-1]\n")

	ps, err := LoadProfiles(project, home)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ps.Names(), ","); got != "cheap,home-only,large" {
		t.Fatalf("profiles %s", got)
	}

	def, err := ps.Select("")
	if err != nil || def == nil || def.Name != "cheap" {
		t.Fatalf("default profile = %v, %v; want cheap", def, err)
	}
	src := []byte("type: task\ncommands: [x]\nbackends: [azure]\n")
	cfg, err := Parse("t.yml", src, WithProfile(def))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Task.RunSpec
	if r.SpotPolicy != SpotPolicyAuto || r.MaxPrice != 1.5 || r.Retry == nil || len(r.Retry.OnEvents) != 3 {
		t.Errorf("profile fields not merged: spot %q price %v retry %+v", r.SpotPolicy, r.MaxPrice, r.Retry)
	}
	if strings.Join(r.Backends, ",") != "azure" {
		t.Errorf("the run's own backends must win over the profile's, got %v", r.Backends)
	}

	// .gpud/profiles.yml takes precedence over .dstack/profiles.yml for one name.
	large, err := ps.Select("large")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err = Parse("t.yml", []byte("type: task\ncommands: [x]\n"), WithProfile(large))
	if err != nil {
		t.Fatal(err)
	}
	r = cfg.Task.RunSpec
	if r.Queue != "research" || r.Priority == nil || r.Priority.Class != PriorityTrain || strings.Join(r.Backends, ",") != "gcp" || len(r.Regions) != 0 {
		t.Errorf("want gpud's large profile (queue research, priority train, gcp), got queue %q priority %+v backends %v regions %v", r.Queue, r.Priority, r.Backends, r.Regions)
	}

	if _, err := ps.Select("lage"); err == nil || !strings.Contains(err.Error(), "did you mean large") {
		t.Errorf("unknown profile error = %v", err)
	}
}

func TestProfilesReportErrorsWithPositions(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".dstack", "profiles.yml"), "profiles:\n  - name: p\n    spot_polcy: spot\n")
	_, err := LoadProfiles(dir)
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 1 || list[0].Line != 3 || !strings.Contains(list[0].Fix, "spot_policy") {
		t.Fatalf("want one positioned error suggesting spot_policy, got %v", err)
	}
}

func TestProfilesDoNotApplyToFleets(t *testing.T) {
	p := &Profile{Name: "p", set: map[string]bool{"backends": true}, spec: RunSpec{Backends: []string{"aws"}}}
	cfg, err := Parse("f.yml", []byte("type: fleet\nnodes: 1\n"), WithProfile(p))
	if err != nil || len(cfg.Fleet.Backends) != 0 {
		t.Fatalf("fleet got profile backends: %+v, %v", cfg, err)
	}
}
