package state_test

import (
	"path/filepath"
	"testing"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/agent/state"
	"gpud.dev/gpud/api"
)

func TestRecordsSurviveReopenWithoutCredentials(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db")
	db, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := state.Record{
		Spec:   api.JobSpec{ID: "j1", Image: "x", RegistryAuth: &api.JobRegistryAuth{Username: "u", Password: "secret"}},
		Status: api.JobStatus{ID: "j1", State: api.JobRunning},
		Handle: runtime.Handle{JobID: "j1", ID: "abc"},
	}
	if err := db.Put(rec); err != nil {
		t.Fatal(err)
	}
	if err := db.Put(state.Record{Spec: api.JobSpec{ID: "j2"}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Delete("j2"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	all, err := db.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].Handle.ID != "abc" || all[0].Status.State != api.JobRunning {
		t.Fatalf("records = %+v", all)
	}
	if all[0].Spec.RegistryAuth != nil {
		t.Fatal("registry credentials were written to the state file")
	}
}

func TestSecondOpenFailsWhileTheFileIsHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.db")
	db, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := state.Open(path); err == nil {
		t.Fatal("a second agent opened the same state file")
	}
}
