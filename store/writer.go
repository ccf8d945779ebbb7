package store

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"go.etcd.io/bbolt"
)

// maxGroup bounds the mutations one transaction gathers from several
// callers; a single Apply larger than this still commits alone, atomically.
const maxGroup = 20000

type request struct {
	ctx  context.Context
	muts []Mutation
	done chan response
}

type response struct {
	res Result
	err error
}

// Apply commits muts atomically and returns once the transaction holding
// them is fsynced: either every mutation of the call is committed or none.
// Calls from many goroutines are grouped into one transaction (group commit);
// a call that fails (a *ConflictError, ErrExists, an invalid record) fails
// alone and does not affect the others of its group. Once Apply has handed
// the call to the writer it waits for the outcome even if ctx ends, so a
// nil error always means durable and an error always means not applied.
func (s *Store) Apply(ctx context.Context, muts ...Mutation) (Result, error) {
	if len(muts) == 0 {
		return Result{}, nil
	}
	req := &request{ctx: ctx, muts: muts, done: make(chan response, 1)}
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return Result{}, ErrClosed
	}
	select {
	case s.reqs <- req:
	case <-ctx.Done():
		s.closeMu.RUnlock()
		return Result{}, fmt.Errorf("apply: %w", ctx.Err())
	}
	s.closeMu.RUnlock()
	r := <-req.done
	return r.res, r.err
}

// runWriter is the single writer goroutine: it takes the first waiting
// call, gathers every other call already queued (up to maxGroup
// mutations), and commits them in one bbolt transaction.
func (s *Store) runWriter() {
	defer close(s.writerDone)
	for {
		var first *request
		select {
		case first = <-s.reqs:
		case <-s.quit:
			// Close has stopped new calls; commit those already queued.
			for {
				select {
				case r := <-s.reqs:
					s.commit([]*request{r})
				default:
					return
				}
			}
		}
		s.commit(s.gather(first))
	}
}

// gather collects the calls queued behind first. Callers released by the
// previous commit are usually about to submit again; yielding the processor
// while new calls keep arriving lets them join this group instead of the
// next, which keeps groups full rather than alternating big and small. With
// a single caller nothing arrives and the yield costs nothing.
func (s *Store) gather(first *request) []*request {
	group := []*request{first}
	n := len(first.muts)
	for yields := 0; n < maxGroup; {
		select {
		case r := <-s.reqs:
			group = append(group, r)
			n += len(r.muts)
			continue
		default:
		}
		if yields == maxYields {
			break
		}
		yields++
		runtime.Gosched()
		if len(s.reqs) == 0 && yields > 1 {
			break // two yields brought nobody: the callers are not coming back now
		}
	}
	return group
}

// maxYields bounds how often gather yields waiting for more callers.
const maxYields = 4

// commit stages each call of the group, writes the survivors in one
// transaction, then updates memory, publishes the changes and releases the
// callers — in that order, so a caller that returns sees its own write.
func (s *Store) commit(group []*request) {
	now := time.Now().UTC()
	n := 0
	for _, r := range group {
		n += len(r.muts)
	}
	tx := newOverlaySized(s.mem, nil, n)
	type staged struct {
		req      *request
		versions []uint64
	}
	ok := make([]staged, 0, len(group))
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.done <- response{err: fmt.Errorf("apply: %w", err)}
			continue
		}
		c, versions, err := s.stage(tx, r.muts, now)
		if err != nil {
			r.done <- response{err: err}
			continue
		}
		tx.merge(c)
		ok = append(ok, staged{r, versions})
	}
	if len(ok) == 0 {
		return
	}
	s.commitMu.Lock()
	seq := s.mem.seq
	if len(tx.order) > 0 {
		seq++
		if err := s.write(tx); err != nil {
			err = fmt.Errorf("commit: %w", err)
			s.commitMu.Unlock()
			for _, st := range ok {
				st.req.done <- response{err: err}
			}
			return
		}
		s.stats.commits.Add(1)
	}
	s.stats.mutations.Add(uint64(len(ok)))
	s.mem.mu.Lock()
	for _, k := range tx.order {
		e := tx.entries[k]
		switch {
		case k.kind == KindKV && e.kv != nil:
			s.mem.kv[k.id] = *e.kv
		case k.kind == KindKV:
			delete(s.mem.kv, k.id)
		case e.rec != nil:
			s.mem.tables[k.kind].put(e.rec)
		default:
			s.mem.tables[k.kind].remove(k.id)
		}
	}
	s.mem.seq = seq
	s.mem.mu.Unlock()
	s.commitMu.Unlock()
	if len(tx.changes) > 0 {
		s.feed.publish(seq, tx.changes)
	}
	for _, st := range ok {
		st.req.done <- response{res: Result{Seq: seq, Versions: st.versions}}
	}
}

// write puts the staged entries into one bbolt transaction and commits it
// (bbolt fsyncs the data pages, then the meta page).
func (s *Store) write(tx *overlay) error {
	return s.db.Update(func(btx *bbolt.Tx) error {
		for _, k := range tx.order {
			e := tx.entries[k]
			name := []byte(k.kind)
			b := btx.Bucket(name)
			if b == nil {
				return fmt.Errorf("bucket %q missing", k.kind)
			}
			var err error
			if e.enc != nil {
				err = b.Put([]byte(k.id), e.enc)
			} else {
				err = b.Delete([]byte(k.id))
			}
			if err != nil {
				return fmt.Errorf("%s %q: %w", k.kind, k.id, err)
			}
		}
		return nil
	})
}
