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

// maxYields bounds how often the writer yields waiting for more callers.
const maxYields = 4

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
// a call that fails a check (a *ConflictError, ErrExists, an invalid record)
// fails alone and does not affect the others of its group. If writing a
// transaction fails (a disk error), its calls fail, and so do the calls
// already staged on top of it. Once Apply has handed the call to the writer
// it waits for the outcome even if ctx ends, so a nil error always means
// durable and an error always means not applied.
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

// batch is one group of calls staged for one transaction.
type batch struct {
	tx   *overlay
	ok   []staged
	n    int // mutations staged
	now  time.Time
	seq  uint64
	err  error         // set by the committer
	done chan struct{} // closed by the committer
}

type staged struct {
	req      *request
	versions []uint64
}

func (s *Store) newBatch(parent *batch) *batch {
	b := &batch{done: make(chan struct{})}
	var p *overlay
	if parent != nil {
		p = parent.tx
	}
	b.tx = newOverlaySized(s.mem, p, 64)
	return b
}

// add stages one call into b, or answers it at once if it fails a check.
func (s *Store) add(b *batch, r *request) {
	if err := r.ctx.Err(); err != nil {
		r.done <- response{err: fmt.Errorf("apply: %w", err)}
		return
	}
	if len(b.ok) == 0 {
		// The batch was made before the writer waited for its first call:
		// its clock starts now, so a record's times are those of the
		// write that made it, not of the previous one.
		b.now = time.Now().UTC()
	}
	c, versions, err := s.stage(b.tx, r.muts, b.now)
	if err != nil {
		r.done <- response{err: err}
		return
	}
	b.tx.merge(c)
	b.ok = append(b.ok, staged{r, versions})
	b.n += len(r.muts)
}

// runWriter is the single writer goroutine. It stages calls into a batch
// while the previous batch is being written and fsynced by runCommitter
// (so staging costs no commit latency), hands the batch over as soon as the
// previous one is durable, then applies that one to memory, publishes its
// changes and releases its callers. With no commit in flight it gathers the
// calls queued now, yielding briefly so that callers just released can join.
func (s *Store) runWriter() {
	defer close(s.writerDone)
	commits := make(chan *batch)
	go s.runCommitter(commits)
	defer close(commits)
	var inflight *batch
	closing := false
	for {
		next := s.newBatch(inflight)
	accumulate:
		for {
			if inflight == nil {
				if len(next.ok) == 0 && next.n == 0 {
					select {
					case r := <-s.reqs:
						s.add(next, r)
						continue
					default:
					}
					if closing {
						return
					}
					select {
					case r := <-s.reqs:
						s.add(next, r)
					case <-s.quit:
						closing = true // commit what is queued, then stop
					}
					continue
				}
				s.gather(next)
				break accumulate
			}
			reqs := s.reqs
			if next.n >= maxGroup {
				reqs = nil
			}
			select {
			case r := <-reqs:
				s.add(next, r)
			case <-inflight.done:
				s.finish(inflight)
				if inflight.err != nil {
					fail(next, fmt.Errorf("an earlier transaction failed: %w", inflight.err))
					next = s.newBatch(nil)
				} else {
					next.tx.parent = nil // memory now holds what the parent staged
				}
				inflight = nil
			}
		}
		if len(next.tx.order) == 0 {
			s.finish(next) // nothing to write: identical puts, deletes of nothing
			continue
		}
		s.commitMu.Lock() // held until finish: Check never sees file and memory apart
		s.nextSeq++
		next.seq = s.nextSeq
		commits <- next
		inflight = next
	}
}

// gather stages the calls queued now. Callers released by the previous
// commit are usually about to submit again; yielding while calls keep
// arriving lets them join this batch instead of the next, which keeps
// batches full rather than alternating big and small. With a single caller
// nothing arrives and the yield costs nothing.
func (s *Store) gather(b *batch) {
	for yields := 0; b.n < maxGroup; {
		select {
		case r := <-s.reqs:
			s.add(b, r)
			continue
		default:
		}
		if yields == maxYields {
			return
		}
		yields++
		runtime.Gosched()
		if len(s.reqs) == 0 && yields > 1 {
			return // two yields brought nobody: the callers are not coming back now
		}
	}
}

// runCommitter writes each batch in one bbolt transaction (bbolt fsyncs the
// data pages, then the meta page) and reports through batch.done.
func (s *Store) runCommitter(commits <-chan *batch) {
	for b := range commits {
		if err := s.write(b.tx); err != nil {
			b.err = fmt.Errorf("commit: %w", err)
		} else {
			s.stats.commits.Add(1)
		}
		close(b.done)
	}
}

// finish makes a written batch visible: memory first, then the change
// feed, then the callers, so a caller that returns reads its own write.
func (s *Store) finish(b *batch) {
	written := len(b.tx.order) > 0
	if written {
		defer s.commitMu.Unlock()
	}
	if b.err != nil {
		if written {
			s.nextSeq = s.mem.seq // the failed sequence number is reused
		}
		fail(b, b.err)
		return
	}
	s.stats.mutations.Add(uint64(len(b.ok)))
	seq := s.mem.seq
	if written {
		seq = b.seq
		s.mem.mu.Lock()
		for _, k := range b.tx.order {
			e := b.tx.entries[k]
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
		if len(b.tx.changes) > 0 {
			s.feed.publish(seq, b.tx.changes)
		}
	}
	for _, st := range b.ok {
		st.req.done <- response{res: Result{Seq: seq, Versions: st.versions}}
	}
}

func fail(b *batch, err error) {
	for _, st := range b.ok {
		st.req.done <- response{err: err}
	}
}

// write puts the staged entries into one bbolt transaction and commits it.
func (s *Store) write(tx *overlay) error {
	return s.db.Update(func(btx *bbolt.Tx) error {
		for _, k := range tx.order {
			e := tx.entries[k]
			b := btx.Bucket([]byte(k.kind))
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
