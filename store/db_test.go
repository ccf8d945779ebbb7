package store

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenOfAFileHeldByAnotherProcessFailsFast holds the state file in a
// real child process and checks that Open gives up with ErrLocked naming
// the file instead of waiting for the lock; a 30s deadline turns a hang
// into a failure (how long it took is logged, not asserted).
func TestOpenOfAFileHeldByAnotherProcessFailsFast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=hold", "GPUD_STORE_TEST_PATH="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("holder did not start: %q %v", line, err)
	}
	start := time.Now()
	type opened struct {
		s   *Store
		err error
	}
	done := make(chan opened, 1)
	go func() {
		s, err := Open(path, Options{LockTimeout: 500 * time.Millisecond})
		done <- opened{s, err}
	}()
	var o opened
	select {
	case o = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Open of a held file still waits after 30s; want it to give up after its 500ms LockTimeout")
	}
	s, err, took := o.s, o.err, time.Since(start)
	if err == nil {
		s.Close()
		t.Fatal("second open of a held file succeeded")
	}
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want ErrLocked naming the file", err)
	}
	t.Logf("open gave up after %s: %v", took, err)
	// Once the holder exits, the file opens.
	stdin.Close()
	cmd.Wait()
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("open after the holder left: %v", err)
	}
	s.Close()
}

func TestReopenRebuildsIndexesFromTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	seed(t, s)
	j, _ := s.Jobs().Get("r1-0")
	j.Status, j.Instance = JobRunning, "h1"
	mustApply(t, s, Update(j), Put(Record{Kind: KindSecret, ID: "main/hf", Project: "main", Sealed: []byte("hf_token")}))
	mustApply(t, s, Delete(KindFleet, "gpu"), Put(Record{Kind: KindInstance, ID: "h1", Project: "main", Status: InstanceBusy}))
	before := s.Jobs().List()
	s.Close()

	s = openAt(t, path, Options{})
	if got := s.Jobs().List(); len(got) != len(before) || got[0].Version != before[0].Version || !got[0].UpdatedAt.Equal(before[0].UpdatedAt) {
		t.Fatalf("jobs after reopen = %+v, want %+v", got, before)
	}
	tests := []struct {
		name string
		got  []Record
		want []string
	}{
		{"jobs by status follow the last update", s.Jobs().ByStatus(JobRunning), []string{"r1-0"}},
		{"old status index entry is gone", s.Jobs().ByStatus(JobSubmitted), nil},
		{"jobs by instance", s.Jobs().ByInstance("h1"), []string{"r1-0"}},
		{"jobs by run", s.Jobs().ByRun("r1"), []string{"r1-0"}},
		{"runs by queue", s.Runs().ByQueue("research"), []string{"r1"}},
		{"runs by project", s.Runs().ByProject("main"), []string{"r1"}},
		{"deleted fleet leaves its index", s.Instances().ByFleet("gpu"), nil},
		{"instances by status", s.Instances().ByStatus(InstanceIdle, InstanceBusy), []string{"h1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ids []string
			for _, r := range tc.got {
				ids = append(ids, r.ID)
			}
			if strings.Join(ids, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v", ids, tc.want)
			}
		})
	}
	sec, err := s.Secrets().Get("main/hf")
	if err != nil || string(sec.Sealed) != "hf_token" {
		t.Fatalf("secret after reopen = %q, %v", sec.Sealed, err)
	}
	noProblems(t, s)
}

func TestUserByTokenFindsOnlyTheHash(t *testing.T) {
	s := openTest(t)
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, Put(Record{Kind: KindUser, ID: "alice", TokenHash: HashToken(tok)}))
	u, err := s.UserByToken(tok)
	if err != nil || u.ID != "alice" {
		t.Fatalf("UserByToken = %v, %v", u.ID, err)
	}
	if _, err := s.UserByToken(tok + "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("wrong token: err = %v", err)
	}
	raw, _ := os.ReadFile(s.Path())
	if strings.Contains(string(raw), tok) {
		t.Fatal("token stored in plaintext")
	}
}
