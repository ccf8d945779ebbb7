package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestFeedDeliversCommittedChangesInOrderWithFilters(t *testing.T) {
	s := openTest(t)
	all := s.Subscribe("")
	defer all.Close()
	jobs := s.Subscribe("", KindJob)
	defer jobs.Close()
	one := s.Subscribe("j2", KindJob)
	defer one.Close()
	for i := range 5 {
		mustApply(t, s, Put(Record{Kind: KindJob, ID: fmt.Sprintf("j%d", i), Status: JobSubmitted}), Put(Record{Kind: KindRun, ID: fmt.Sprintf("r%d", i)}))
	}
	mustApply(t, s, Delete(KindJob, "j2"))

	want := []string{"jobs/j0", "runs/r0", "jobs/j1", "runs/r1", "jobs/j2", "runs/r2", "jobs/j3", "runs/r3", "jobs/j4", "runs/r4", "jobs/j2 deleted"}
	tests := []struct {
		name string
		sub  *Subscription
		want []string
	}{
		{"all kinds in commit order", all, want},
		{"only jobs", jobs, []string{"jobs/j0", "jobs/j1", "jobs/j2", "jobs/j3", "jobs/j4", "jobs/j2 deleted"}},
		{"only one key", one, []string{"jobs/j2", "jobs/j2 deleted"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var last uint64
			for i, w := range tc.want {
				select {
				case ch := <-tc.sub.C:
					got := string(ch.Kind) + "/" + ch.ID
					if ch.Deleted {
						got += " deleted"
					}
					if got != w || ch.Seq < last || ch.Lagged {
						t.Fatalf("change %d = %s (seq %d, lagged %v), want %s after seq %d", i, got, ch.Seq, ch.Lagged, w, last)
					}
					last = ch.Seq
				case <-time.After(5 * time.Second):
					t.Fatalf("change %d (%s) never arrived", i, w)
				}
			}
		})
	}
}

// TestSlowSubscriberNeverBlocksTheWriter keeps a subscriber that reads
// nothing while 2,000 commits go through, then checks it is told it lagged
// and that changes after the marker flow again.
func TestSlowSubscriberNeverBlocksTheWriter(t *testing.T) {
	s := openTest(t)
	slow := s.SubscribeBuffer(16, "", KindEvent)
	defer slow.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 2000 {
		if _, err := s.Apply(ctx, Put(Record{Kind: KindEvent, ID: fmt.Sprintf("e%05d", i)})); err != nil {
			t.Fatalf("writer blocked or failed at commit %d: %v", i, err)
		}
	}
	seq := s.Seq()
	sawLag := false
	for !sawLag {
		select {
		case ch := <-slow.C:
			if ch.Lagged {
				sawLag = true
				if ch.Seq != seq {
					t.Fatalf("lag marker at seq %d, want the last commit %d", ch.Seq, seq)
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no lag marker")
		}
	}
	mustApply(t, s, Put(Record{Kind: KindEvent, ID: "after"}))
	select {
	case ch := <-slow.C:
		if ch.ID != "after" || ch.Lagged {
			t.Fatalf("after resync got %+v", ch)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("changes stopped after the lag marker")
	}
}

func TestStoreCloseClosesSubscriptions(t *testing.T) {
	s := openTest(t)
	sub := s.Subscribe("")
	s.Close()
	select {
	case _, ok := <-sub.C:
		if ok {
			t.Fatal("got a change after close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("subscription channel not closed by Store.Close")
	}
}
