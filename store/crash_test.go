package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// childCrash writes under load until it is killed, printing one line per
// acknowledged Apply: "ack KIND/ID ..." for records, "ctr ID VERSION" for
// compare-and-set counters, "kv KEY" for key-value puts.
func childCrash(path string) int {
	s, err := Open(path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	tag := os.Getenv("GPUD_STORE_TEST_TAG")
	_, _ = s.Apply(ctx, Create(Record{Kind: KindProject, ID: "main"}))
	_, _ = s.Apply(ctx, Create(Record{Kind: KindQueue, ID: "q", Project: "main"}))
	var out sync.Mutex
	say := func(line string) {
		out.Lock()
		os.Stdout.WriteString(line + "\n")
		out.Unlock()
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctr := fmt.Sprintf("ctr-%d", g)
			for n := 0; ; n++ {
				switch n % 4 {
				case 0, 1: // a run and its jobs in one call
					run := fmt.Sprintf("%s-%d-%d", tag, g, n)
					muts := []Mutation{Put(Record{Kind: KindRun, ID: run, Project: "main", Queue: "q", Status: RunSubmitted})}
					ids := []string{"runs/" + run}
					for j := range 1 + n%5 {
						id := fmt.Sprintf("%s-%d", run, j)
						muts = append(muts, Put(Record{Kind: KindJob, ID: id, Project: "main", Run: run, Queue: "q", Status: JobSubmitted}))
						ids = append(ids, "jobs/"+id)
					}
					if _, err := s.Apply(ctx, muts...); err == nil {
						say("ack " + strings.Join(ids, " "))
					}
				case 2: // compare-and-set on a per-goroutine counter
					cur, err := s.Queues().Get(ctr)
					if err != nil {
						cur = Record{Kind: KindQueue, ID: ctr, Project: "main"}
					}
					cur.Kind, cur.Name = KindQueue, strconv.Itoa(n)
					if res, err := s.Apply(ctx, Update(cur)); err == nil {
						say(fmt.Sprintf("ctr %s %d", ctr, res.Versions[0]))
					}
				case 3:
					key := fmt.Sprintf("certs/%s/%d/%d.crt", tag, g, n)
					if _, err := s.Apply(ctx, KVPut(key, []byte("cert"))); err == nil {
						say("kv " + key)
					}
				}
			}
		}()
	}
	wg.Wait()
	return 0
}

// TestCrashKeepsAcknowledgedMutations kills a writing child process with
// SIGKILL at random moments and checks, after every kill, that the store
// opens, its invariants hold and every acknowledged mutation is present.
func TestCrashKeepsAcknowledgedMutations(t *testing.T) {
	kills := 100
	path := filepath.Join(t.TempDir(), "state.db")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	counters := map[string]uint64{}
	total := 0
	for i := range kills {
		acked := runAndKill(t, path, fmt.Sprintf("k%d", i), time.Duration(5+rng.IntN(60))*time.Millisecond)
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatalf("kill %d: open after SIGKILL: %v", i, err)
		}
		for _, line := range acked {
			f := strings.Fields(line)
			switch f[0] {
			case "ack":
				for _, ref := range f[1:] {
					kind, id, _ := strings.Cut(ref, "/")
					if _, err := s.Collection(Kind(kind)).Get(id); err != nil {
						t.Fatalf("kill %d: acknowledged %s lost: %v", i, ref, err)
					}
				}
			case "ctr":
				v, _ := strconv.ParseUint(f[2], 10, 64)
				counters[f[1]] = max(counters[f[1]], v)
			case "kv":
				if _, err := s.KV().Load(context.Background(), f[1]); err != nil {
					t.Fatalf("kill %d: acknowledged key %s lost: %v", i, f[1], err)
				}
			}
		}
		for id, v := range counters {
			if r, err := s.Queues().Get(id); err != nil || r.Version < v {
				t.Fatalf("kill %d: counter %s at version %d (err %v), acknowledged %d", i, id, r.Version, err, v)
			}
		}
		total += len(acked)
		noProblems(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("%d SIGKILLs, %d acknowledged calls verified present", kills, total)
}

// runAndKill starts the crash child, lets it write for d after its first
// acknowledgement, kills it with SIGKILL and returns the complete lines it
// printed (a line cut by the kill was not acknowledged).
func runAndKill(t *testing.T, path, tag string, d time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=crash", "GPUD_STORE_TEST_PATH="+path, "GPUD_STORE_TEST_TAG="+tag)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	var lines []string
	first, err := r.ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("crash child printed nothing: %v", err)
	}
	lines = append(lines, strings.TrimSuffix(first, "\n"))
	timer := time.AfterFunc(d, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	defer timer.Stop()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break // EOF after the kill; a partial line is dropped
		}
		lines = append(lines, strings.TrimSuffix(line, "\n"))
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("crash child ended with %v, want SIGKILL", err)
	}
	return lines
}
