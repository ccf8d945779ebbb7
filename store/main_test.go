package store

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Child roles: the tests re-execute this binary to get a real second process.
const childEnv = "GPUD_STORE_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "hold":
		os.Exit(childHold(os.Getenv("GPUD_STORE_TEST_PATH")))
	case "crash":
		os.Exit(childCrash(os.Getenv("GPUD_STORE_TEST_PATH")))
	}
	os.Exit(m.Run())
}

// childHold opens the store, says "ready" and holds it until stdin closes.
func childHold(path string) int {
	s, err := Open(path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Close()
	return 0
}

// openTest opens a fresh store in a temporary directory on disk.
func openTest(t testing.TB) *Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "state.db"), Options{})
}

func openAt(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustApply(t testing.TB, s *Store, muts ...Mutation) Result {
	t.Helper()
	res, err := s.Apply(context.Background(), muts...)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

func spec(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// fixture records: a project, a queue, a fleet, an instance, a run and its job.
func seed(t testing.TB, s *Store) {
	t.Helper()
	mustApply(t, s,
		Put(Record{Kind: KindProject, ID: "main", Name: "main"}),
		Put(Record{Kind: KindQueue, ID: "research", Project: "main"}),
		Put(Record{Kind: KindFleet, ID: "gpu", Project: "main", Status: "active"}),
		Put(Record{Kind: KindInstance, ID: "h1", Project: "main", Fleet: "gpu", Status: InstanceIdle}),
		Put(Record{Kind: KindRun, ID: "r1", Project: "main", Queue: "research", Status: RunSubmitted, Spec: spec(map[string]any{"image": "busybox"})}),
		Put(Record{Kind: KindJob, ID: "r1-0", Project: "main", Run: "r1", Queue: "research", Status: JobSubmitted}),
	)
}

func noProblems(t testing.TB, s *Store) {
	t.Helper()
	probs, err := s.Check(context.Background())
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	for _, p := range probs {
		t.Errorf("invariant broken: %s", p)
	}
}

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}
