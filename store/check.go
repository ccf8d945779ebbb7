package store

import (
	"bytes"
	"context"
	"fmt"
	"sort"

	"go.etcd.io/bbolt"
)

// Problem is one broken invariant found by Check.
type Problem struct {
	Kind Kind
	ID   string
	What string
}

// String reads "kind \"id\": what".
func (p Problem) String() string { return fmt.Sprintf("%s %q: %s", p.Kind, p.ID, p.What) }

// Check verifies the store's invariants: every record in the file decodes
// and equals its in-memory copy, memory holds nothing the file lacks, every
// index entry points to a record with that value (and every record is in its
// indexes), and references resolve (project, run, instance, fleet, queue,
// user). Events and usage are history and may name deleted things. Check
// pauses commits while it reads; it is for `gpud admin check` and tests,
// not for hot paths.
func (s *Store) Check(ctx context.Context) ([]Problem, error) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	var probs []Problem
	add := func(k Kind, id, format string, args ...any) {
		probs = append(probs, Problem{Kind: k, ID: id, What: fmt.Sprintf(format, args...)})
	}
	err := s.db.View(func(tx *bbolt.Tx) error {
		for _, k := range Kinds() {
			if err := ctx.Err(); err != nil {
				return err
			}
			t := s.mem.tables[k]
			seen := 0
			err := tx.Bucket([]byte(k)).ForEach(func(key, v []byte) error {
				seen++
				r, err := decodeRecord(k, v)
				if err == nil && len(r.Sealed) > 0 {
					r.Sealed, err = s.keys.open(r.Sealed, recordAAD(k, r.ID))
				}
				switch m := t.recs[string(key)]; {
				case err != nil:
					add(k, string(key), "does not decode: %v", err)
				case r.ID != string(key):
					add(k, string(key), "stored under the key of another id %q", r.ID)
				case m == nil:
					add(k, r.ID, "in the file but not in memory")
				case m.Version != r.Version || !sameContent(m, &r):
					add(k, r.ID, "file (version %d) and memory (version %d) differ", r.Version, m.Version)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if seen != len(t.recs) {
				add(k, "", "file holds %d records, memory %d", seen, len(t.recs))
			}
		}
		n := 0
		err := tx.Bucket([]byte(KindKV)).ForEach(func(key, v []byte) error {
			n++
			e, err := decodeKV(s.keys, string(key), v)
			if m, ok := s.mem.kv[string(key)]; err != nil || !ok || !bytes.Equal(m.value, e.value) {
				add(KindKV, string(key), "file and memory differ (decode error: %v)", err)
			}
			return nil
		})
		if n != len(s.mem.kv) {
			add(KindKV, "", "file holds %d keys, memory %d", n, len(s.mem.kv))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	s.mem.mu.RLock()
	defer s.mem.mu.RUnlock()
	for _, k := range Kinds() {
		probs = append(probs, s.checkIndexes(k)...)
		probs = append(probs, s.checkRefs(k)...)
	}
	sort.Slice(probs, func(i, j int) bool { return probs[i].String() < probs[j].String() })
	return probs, nil
}

func (s *Store) checkIndexes(k Kind) []Problem {
	var probs []Problem
	t := s.mem.tables[k]
	for f := indexField(0); f < numIndexes; f++ {
		for v, set := range t.idx[f] {
			for id := range set {
				if r := t.recs[id]; r == nil || fieldOf(r, f) != v {
					probs = append(probs, Problem{k, id, fmt.Sprintf("index %s=%q is stale", f, v)})
				}
			}
		}
		for id, r := range t.recs {
			if v := fieldOf(r, f); v != "" {
				if _, ok := t.idx[f][v][id]; !ok {
					probs = append(probs, Problem{k, id, fmt.Sprintf("missing from index %s=%q", f, v)})
				}
			}
		}
	}
	return probs
}

func (s *Store) checkRefs(k Kind) []Problem {
	if k == KindEvent || k == KindUsage {
		return nil
	}
	var probs []Problem
	ref := func(r *Record, field string, target Kind, id string) {
		if id != "" && target != k && s.mem.tables[target].recs[id] == nil {
			probs = append(probs, Problem{k, r.ID, fmt.Sprintf("%s %q does not exist", field, id)})
		}
	}
	for _, r := range s.mem.tables[k].recs {
		ref(r, "project", KindProject, r.Project)
		ref(r, "run", KindRun, r.Run)
		ref(r, "instance", KindInstance, r.Instance)
		ref(r, "fleet", KindFleet, r.Fleet)
		ref(r, "queue", KindQueue, r.Queue)
		ref(r, "user", KindUser, r.User)
	}
	return probs
}
