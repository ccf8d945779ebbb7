package docker

import (
	"slices"
	"testing"

	"gpud.dev/gpud/api"
)

// The container fields reach the engine's create request as dstack means
// them: an entrypoint replaces the image's and takes the commands as its
// arguments; a relative working_dir lies under /workflow; user, shm size
// and privileged are passed as given. (The daemon's e2e tests see them
// from inside the job; privileged cannot be, where the engine refuses the
// capabilities.)
func TestContainerConfigCarriesTheContainerFields(t *testing.T) {
	r := &Runtime{}
	spec := api.JobSpec{ID: "j", Image: "img", Commands: []string{"one two", "three"}, Entrypoint: []string{"/bin/sh", "-c", "x"},
		WorkingDir: "sub/dir", User: "65534:65534", ShmSize: 64 * api.MB, Privileged: true}
	cfg, hc, err := r.containerConfig(spec, "/tmp/hostfile")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Entrypoint, spec.Entrypoint) || !slices.Equal(cfg.Cmd, spec.Commands) {
		t.Errorf("entrypoint %q cmd %q, want the entrypoint with the commands as arguments", cfg.Entrypoint, cfg.Cmd)
	}
	if cfg.WorkingDir != "/workflow/sub/dir" || cfg.User != spec.User || hc.ShmSize != int64(64*api.MB) || !hc.Privileged {
		t.Errorf("working dir %q, user %q, shm %d, privileged %v", cfg.WorkingDir, cfg.User, hc.ShmSize, hc.Privileged)
	}
	spec.Entrypoint, spec.WorkingDir, spec.Privileged = nil, "/abs", false
	cfg, hc, err = r.containerConfig(spec, "/tmp/hostfile")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Entrypoint) != 0 || !slices.Equal(cfg.Cmd, []string{"/bin/sh", "-c", "one two && three"}) || cfg.WorkingDir != "/abs" || hc.Privileged {
		t.Errorf("without entrypoint: entrypoint %q cmd %q working dir %q privileged %v", cfg.Entrypoint, cfg.Cmd, cfg.WorkingDir, hc.Privileged)
	}
}
