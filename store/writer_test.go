package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestApplyPutGetAndVersions(t *testing.T) {
	s := openTest(t)
	seed(t, s)
	r, err := s.Jobs().Get("r1-0")
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != 1 || r.CreatedAt.IsZero() || r.Status != JobSubmitted {
		t.Fatalf("after create: %+v", r)
	}
	r.Status = JobRunning
	res := mustApply(t, s, Update(r))
	if res.Versions[0] != 2 {
		t.Fatalf("version after update = %d, want 2", res.Versions[0])
	}
	got, _ := s.Jobs().Get("r1-0")
	if got.Status != JobRunning || got.Version != 2 || !got.CreatedAt.Equal(r.CreatedAt) {
		t.Fatalf("after update: %+v", got)
	}
	noProblems(t, s)
}

func TestApplyFailsOnlyTheConflictingCall(t *testing.T) {
	s := openTest(t)
	seed(t, s)
	stale, _ := s.Jobs().Get("r1-0")
	fresh := stale
	fresh.Status = JobPulling
	mustApply(t, s, Update(fresh))

	tests := []struct {
		name string
		muts []Mutation
		want error
	}{
		{"update with a stale version conflicts", []Mutation{Put(Record{Kind: KindJob, ID: "x1"}), Update(stale)}, ErrConflict},
		{"create of an existing record fails", []Mutation{Put(Record{Kind: KindJob, ID: "x2"}), Create(Record{Kind: KindRun, ID: "r1"})}, ErrExists},
		{"delete with a stale version conflicts", []Mutation{Put(Record{Kind: KindJob, ID: "x3"}), DeleteIfVersion(KindJob, "r1-0", 1)}, ErrConflict},
		{"invalid spec is rejected", []Mutation{Put(Record{Kind: KindJob, ID: "x4"}), Put(Record{Kind: KindJob, ID: "bad", Spec: []byte("{")})}, ErrInvalid},
		{"unknown kind is rejected", []Mutation{Put(Record{Kind: KindJob, ID: "x5"}), Put(Record{Kind: "nope", ID: "a"})}, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Submit the failing call together with good calls so they share a group.
			var wg sync.WaitGroup
			goodErrs := make([]error, 8)
			for i := range goodErrs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, goodErrs[i] = s.Apply(context.Background(), Put(Record{Kind: KindEvent, ID: fmt.Sprintf("%s-%d", tc.name, i)}))
				}()
			}
			_, err := s.Apply(context.Background(), tc.muts...)
			wg.Wait()
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			first := tc.muts[0].rec.ID
			if _, err := s.Jobs().Get(first); !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s of the failed call was applied (err %v): calls must be atomic", first, err)
			}
			for i, err := range goodErrs {
				if err != nil {
					t.Fatalf("good call %d failed with the bad one: %v", i, err)
				}
			}
		})
	}
	got, _ := s.Jobs().Get("r1-0")
	if got.Status != JobPulling {
		t.Fatalf("status = %s, want pulling", got.Status)
	}
	noProblems(t, s)
}

func TestUnchangedPutIsNotRewritten(t *testing.T) {
	s := openTest(t)
	seed(t, s)
	before := s.Stats().Commits
	r, _ := s.Runs().Get("r1")
	sub := s.Subscribe("", KindRun)
	defer sub.Close()
	res := mustApply(t, s, Put(r))
	if res.Versions[0] != r.Version {
		t.Fatalf("version moved from %d to %d for an identical put", r.Version, res.Versions[0])
	}
	if got := s.Stats().Commits; got != before {
		t.Fatalf("identical put committed a transaction (%d -> %d)", before, got)
	}
	r.Status = RunRunning
	mustApply(t, s, Put(r))
	ch := <-sub.C
	if ch.ID != "r1" || ch.Record.Status != RunRunning {
		t.Fatalf("first change after identical put = %+v, want the status change", ch)
	}
}

func TestPlanOf10000BindsCommitsInOneTransaction(t *testing.T) {
	s := openTest(t)
	seed(t, s)
	plan := make([]Mutation, 0, 10000)
	for i := range 10000 {
		plan = append(plan, Put(Record{Kind: KindJob, ID: fmt.Sprintf("bind-%05d", i), Project: "main", Run: "r1", Queue: "research", Instance: "h1", Status: JobProvisioning}))
	}
	before := s.Stats().Commits
	mustApply(t, s, plan...)
	if got := s.Stats().Commits - before; got != 1 {
		t.Fatalf("plan took %d commits, want 1", got)
	}
	if n := len(s.Jobs().ByInstance("h1")); n != 10000 {
		t.Fatalf("jobs on h1 = %d, want 10000", n)
	}
	// The same plan with one stale CAS at its end applies nothing.
	plan2 := make([]Mutation, 0, 10001)
	for i := range 10000 {
		plan2 = append(plan2, Put(Record{Kind: KindJob, ID: fmt.Sprintf("bind2-%05d", i), Project: "main", Run: "r1", Status: JobProvisioning}))
	}
	plan2 = append(plan2, Update(Record{Kind: KindJob, ID: "r1-0", Version: 99}))
	if _, err := s.Apply(context.Background(), plan2...); !errors.Is(err, ErrConflict) {
		t.Fatalf("err = %v, want conflict", err)
	}
	if _, err := s.Jobs().Get("bind2-00000"); !errors.Is(err, ErrNotFound) {
		t.Fatal("part of a rejected plan was applied")
	}
	noProblems(t, s)
}

func TestConcurrentWritersShareCommits(t *testing.T) {
	s := openTest(t)
	const writers, each = 64, 20
	before := s.Stats()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := s.Apply(context.Background(), Put(Record{Kind: KindEvent, ID: fmt.Sprintf("w%d-%d", w, i)})); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	after := s.Stats()
	muts, commits := after.Mutations-before.Mutations, after.Commits-before.Commits
	if muts != writers*each || s.Events().Count() != writers*each {
		t.Fatalf("mutations = %d, events = %d, want %d", muts, s.Events().Count(), writers*each)
	}
	if commits >= muts {
		t.Fatalf("%d commits for %d mutations: no group commit", commits, muts)
	}
}

func TestApplyAfterCloseFails(t *testing.T) {
	s := openTest(t)
	s.Close()
	if _, err := s.Apply(context.Background(), Put(Record{Kind: KindJob, ID: "a"})); !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
}

func TestAddUsageSumsConcurrentCalls(t *testing.T) {
	s := openTest(t)
	seed(t, s)
	var wg sync.WaitGroup
	at := mustTime("2026-01-02T03:04:05Z")
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Apply(context.Background(), AddUsage("research", at, map[string]float64{"gpu": 2, "cpu": 0.5})); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	recs := s.Usage().ByQueue("research")
	if len(recs) != 1 {
		t.Fatalf("usage windows = %d, want 1", len(recs))
	}
	if got := string(recs[0].Spec); got != `{"cpu":25,"gpu":100}` {
		t.Fatalf("usage = %s", got)
	}
}

// The writer makes its next batch before it waits for that batch's first
// call. A record written after the store sat idle must still carry the
// time of its own write, not of the write before it (a secret PUT was seen
// with a created_at 5-12 s in the past).
func TestRecordTimesAreTakenWhenTheWriteIsApplied(t *testing.T) {
	s := openTest(t)
	mustApply(t, s, Put(Record{Kind: KindJob, ID: "before"}))
	// The idle gap is the scenario itself: the writer is parked waiting.
	idle := 300 * time.Millisecond
	time.Sleep(idle)
	start := time.Now()
	mustApply(t, s, Put(Record{Kind: KindJob, ID: "after"}))
	got, err := s.Jobs().Get("after")
	if err != nil {
		t.Fatal(err)
	}
	if got.CreatedAt.Before(start) || got.UpdatedAt.Before(start) {
		t.Fatalf("created_at %s, updated_at %s: before the write began at %s (stale by %s)",
			got.CreatedAt, got.UpdatedAt, start.UTC(), start.Sub(got.CreatedAt))
	}
}
