package agent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"gpud.dev/gpud/agent/state"
	"gpud.dev/gpud/api"
)

// A managed volume's directory comes from ids the agent checks: a
// project or id that would climb out of the volumes root, or name
// anything but one directory below it, is refused before any file is
// made or removed.
func TestManagedVolumeDirStaysUnderTheVolumesRoot(t *testing.T) {
	dir := t.TempDir()
	a := &Agent{cfg: Config{DataDir: dir}, jobs: map[string]*job{}}
	outside := filepath.Join(dir, "keep")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []api.ManagedVolumeRef{
		{Project: "..", ID: "0123456789abcdef"},
		{Project: "main", ID: ".."},
		{Project: "main", ID: "../../keep"},
		{Project: "main/../..", ID: "0123456789abcdef"},
		{Project: "", ID: "0123456789abcdef"},
		{Project: "main", ID: "/etc"},
	} {
		if err := a.RemoveManagedVolume(ref); !errors.Is(err, ErrInvalid) {
			t.Errorf("remove %+v: %v, want ErrInvalid", ref, err)
		}
		if _, err := a.prepareManaged(api.JobSpec{ID: "j", Volumes: []api.JobVolume{{Path: "/data", Managed: &ref}}}); err == nil {
			t.Errorf("prepare %+v: no error", ref)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Fatalf("a refused ref removed a file outside the volumes root: %v", err)
	}
	ref := api.ManagedVolumeRef{Project: "main", ID: "0123456789abcdef", Name: "v"}
	spec, err := a.prepareManaged(api.JobSpec{ID: "j", Volumes: []api.JobVolume{{HostPath: "/etc", Path: "/data", Managed: &ref}}})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "volumes", "main", ref.ID)
	if got := spec.Volumes[0].HostPath; got != want {
		t.Fatalf("host path %s, want %s (the server's host path is ignored)", got, want)
	}
	fi, err := os.Stat(want)
	if err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("volume dir: %v %v, want mode 0777", fi, err)
	}
	// In use by a job of this host: kept.
	a.jobs["j"] = &job{rec: state.Record{Spec: spec, Status: api.JobStatus{State: api.JobRunning}}}
	if err := a.RemoveManagedVolume(ref); !errors.Is(err, ErrVolumeInUse) {
		t.Fatalf("remove of a volume a running job mounts: %v, want ErrVolumeInUse", err)
	}
	a.jobs["j"].rec.Status.State = api.JobDone
	if err := a.RemoveManagedVolume(ref); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Fatalf("volume dir still there: %v", err)
	}
}
