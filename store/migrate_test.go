package store

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

// TestMigrateFromSchema1Fixture opens a copy of testdata/state-v1.db (made by
// testdata/gen_v1.go) and checks every record survives the upgrade, hosts
// became instances, and the secrets schema 1 kept in plaintext are sealed.
func TestMigrateFromSchema1Fixture(t *testing.T) {
	src, err := os.ReadFile("testdata/state-v1.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	s := openAt(t, path, Options{})
	tests := []struct {
		name       string
		kind       Kind
		id         string
		check      func(Record) bool
		wantStatus string
	}{
		{"job keeps status, binding and version", KindJob, "r1-0", func(r Record) bool { return r.Instance == "h1" && r.Version == 5 }, JobRunning},
		{"hosts bucket became instances", KindInstance, "h1", func(r Record) bool { return r.Fleet == "gpu" && r.Version == 7 }, InstanceBusy},
		{"queue keeps its spec", KindQueue, "research", func(r Record) bool { return string(r.Spec) == `{"deserved":{"gpu":4}}` }, ""},
		{"secret value moved to Sealed", KindSecret, "main/hf", func(r Record) bool { return string(r.Sealed) == "hf_v1_fixture_token" }, ""},
		{"fleet ssh key moved to Sealed", KindFleet, "gpu", func(r Record) bool { return strings.HasPrefix(string(r.Sealed), "-----BEGIN OPENSSH") }, "active"},
		{"timestamps survive", KindRun, "r1", func(r Record) bool {
			return r.CreatedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) && r.UpdatedAt.Equal(r.CreatedAt.Add(time.Hour))
		}, RunRunning},
		{"membership keeps its role", KindMember, "main/alice", func(r Record) bool { return r.Role == "admin" && r.User == "alice" }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := s.Collection(tc.kind).Get(tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tc.wantStatus || !tc.check(r) {
				t.Fatalf("after migration: %+v", r)
			}
		})
	}
	noProblems(t, s)
	s.Close()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.View(func(tx *bbolt.Tx) error {
		if tx.Bucket([]byte("hosts")) != nil {
			t.Error("hosts bucket left behind")
		}
		if v := string(tx.Bucket([]byte(metaBucketName)).Get([]byte(schemaKeyName))); v != "2" {
			t.Errorf("schema after migration = %q", v)
		}
		// Live values are sealed; the fixture's plaintext may linger only on free pages.
		tx.Bucket([]byte(KindSecret)).ForEach(func(_, v []byte) error {
			if bytes.Contains(v, []byte("hf_v1_fixture_token")) {
				t.Error("migrated secret still in plaintext")
			}
			return nil
		})
		return nil
	})
}

func TestOpenRefusesANewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bbolt.Tx) error {
		b, _ := tx.CreateBucket([]byte(metaBucketName))
		return b.Put([]byte(schemaKeyName), []byte("99"))
	})
	db.Close()
	s, err := Open(path, Options{})
	if err == nil {
		s.Close()
		t.Fatal("opened a file of a newer schema")
	}
	if !strings.Contains(err.Error(), "upgrade gpud") {
		t.Fatalf("err = %v, want advice to upgrade", err)
	}
}
