package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/bbolt"
)

// TestBackupIsConsistentUnderWritesAndRestores takes a backup while writers
// commit, restores it, and checks the restored store is a consistent prefix.
func TestBackupIsConsistentUnderWritesAndRestores(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, filepath.Join(dir, "state.db"), Options{})
	seed(t, s)
	mustApply(t, s, Put(sensitive["secret value"]))
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Each call writes a run and its job together: a consistent
				// snapshot never holds one without the other.
				run := fmt.Sprintf("w%d-%d", w, i)
				if _, err := s.Apply(ctx, Put(Record{Kind: KindRun, ID: run, Project: "main"}), Put(Record{Kind: KindJob, ID: run + "-0", Run: run, Project: "main"})); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	backup := filepath.Join(dir, "backup.db")
	mustApply(t, s, Put(Record{Kind: KindRun, ID: "before-backup", Project: "main"}))
	if _, err := s.BackupFile(ctx, backup); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	mustApply(t, s, Put(Record{Kind: KindRun, ID: "after-backup", Project: "main"}))
	s.Close()

	state := filepath.Join(dir, "state.db")
	if err := Restore(backup, state); err != nil {
		t.Fatal(err)
	}
	r := openAt(t, state, Options{})
	if _, err := r.Runs().Get("before-backup"); err != nil {
		t.Fatalf("restored store lacks a record committed before the backup: %v", err)
	}
	if _, err := r.Runs().Get("after-backup"); !errors.Is(err, ErrNotFound) {
		t.Fatal("restored store holds a record committed after the backup")
	}
	if sec, err := r.Secrets().Get("main/db-password"); err != nil || string(sec.Sealed) != string(sensitive["secret value"].Sealed) {
		t.Fatalf("secret after restore: %v", err)
	}
	if len(r.Jobs().List()) != len(r.Runs().List())-1 { // runs hold r1 + w* + before-backup; jobs r1-0 + w*-0
		t.Fatalf("restored %d jobs for %d runs: backup not consistent", len(r.Jobs().List()), len(r.Runs().List()))
	}
	noProblems(t, r)
	if _, err := os.Stat(state + ".before-restore"); err != nil {
		t.Fatalf("replaced file not kept: %v", err)
	}
}

func TestRestoreRefusesWhatIsNotAStateFile(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("not a database"), 0o600)
	empty := filepath.Join(dir, "empty.db")
	db, _ := bbolt.Open(empty, 0o600, nil)
	db.Close()
	for name, path := range map[string]string{"junk bytes": junk, "bbolt file without schema": empty, "missing file": filepath.Join(dir, "nope")} {
		t.Run(name, func(t *testing.T) {
			if err := Restore(path, filepath.Join(dir, "state.db")); err == nil {
				t.Fatal("restore accepted it")
			}
		})
	}
}

// TestCheckFindsBrokenInvariants breaks the file and the indexes behind the
// store's back and expects Check to name each problem.
func TestCheckFindsBrokenInvariants(t *testing.T) {
	s := openTest(t)
	seed(t, s)
	noProblems(t, s)
	mustApply(t, s, Put(Record{Kind: KindJob, ID: "orphan", Run: "no-such-run", Project: "main"}))
	// A record written to the file directly, bypassing memory.
	s.db.Update(func(tx *bbolt.Tx) error {
		enc, _ := s.encode(&Record{Kind: KindRun, ID: "ghost", Project: "main", Version: 1})
		return tx.Bucket([]byte(KindRun)).Put([]byte("ghost"), enc)
	})
	// A stale index entry.
	s.mem.mu.Lock()
	s.mem.tables[KindJob].idx[byStatus]["running"] = map[string]struct{}{"r1-0": {}}
	s.mem.mu.Unlock()

	probs, err := s.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var text []string
	for _, p := range probs {
		text = append(text, p.String())
	}
	all := strings.Join(text, "\n")
	for _, want := range []string{
		`jobs "orphan": run "no-such-run" does not exist`,
		`runs "ghost": in the file but not in memory`,
		`jobs "r1-0": index status="running" is stale`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("check missed %q; found:\n%s", want, all)
		}
	}
}
