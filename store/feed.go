package store

import (
	"sync"
)

// Change is one committed change, delivered to subscribers in commit order.
type Change struct {
	// Seq is the commit sequence number (several changes share one commit).
	Seq uint64
	// Kind and ID name the record (for KindKV, ID is the key).
	Kind Kind
	ID   string
	// Deleted is true when the record or key was removed; Record then holds
	// the last version before the delete (empty for KindKV).
	Deleted bool
	// Record is the record as committed (empty for KindKV).
	Record Record
	// Lagged is true on a marker that replaces changes the subscriber was
	// too slow to take: it must resync from the indexes, which already
	// reflect every commit up to Seq.
	Lagged bool
}

// DefaultFeedBuffer is the number of undelivered changes a subscription
// holds before it is marked lagged.
const DefaultFeedBuffer = 4096

// Subscription receives committed changes on C until Close. The writer
// never waits for it: when more than its buffer of changes are pending, they
// are dropped and replaced by one Change with Lagged set.
type Subscription struct {
	// C delivers changes in commit order; it is closed after Close or when
	// the store closes.
	C <-chan Change

	c      chan Change
	feed   *feed
	kinds  map[Kind]bool
	key    string
	limit  int
	mu     sync.Mutex
	queue  []Change
	lagged bool
	lagSeq uint64
	wake   chan struct{}
	stop   chan struct{}
	once   sync.Once
}

type feed struct {
	mu   sync.Mutex
	subs map[*Subscription]struct{}
}

func newFeed() *feed { return &feed{subs: map[*Subscription]struct{}{}} }

// Subscribe returns a subscription to committed changes of the given kinds
// (all kinds if none), restricted to one record ID or key if key is not
// empty. Changes committed after Subscribe returns are delivered.
func (s *Store) Subscribe(key string, kinds ...Kind) *Subscription {
	return s.SubscribeBuffer(DefaultFeedBuffer, key, kinds...)
}

// SubscribeBuffer is Subscribe with an explicit lag threshold.
func (s *Store) SubscribeBuffer(buffer int, key string, kinds ...Kind) *Subscription {
	if buffer < 1 {
		buffer = 1
	}
	c := make(chan Change)
	sub := &Subscription{C: c, c: c, feed: s.feed, key: key, limit: buffer,
		wake: make(chan struct{}, 1), stop: make(chan struct{})}
	if len(kinds) > 0 {
		sub.kinds = map[Kind]bool{}
		for _, k := range kinds {
			sub.kinds[k] = true
		}
	}
	s.feed.mu.Lock()
	s.feed.subs[sub] = struct{}{}
	s.feed.mu.Unlock()
	go sub.pump()
	return sub
}

// Close stops the subscription and closes C. It is safe to call twice.
func (sub *Subscription) Close() {
	sub.once.Do(func() {
		sub.feed.mu.Lock()
		delete(sub.feed.subs, sub)
		sub.feed.mu.Unlock()
		close(sub.stop)
	})
}

func (sub *Subscription) wants(c *Change) bool {
	if sub.kinds != nil && !sub.kinds[c.Kind] {
		return false
	}
	return sub.key == "" || sub.key == c.ID
}

// offer queues changes without blocking; on overflow it drops the queue and
// marks the subscription lagged.
func (sub *Subscription) offer(seq uint64, changes []Change) {
	sub.mu.Lock()
	added := false
	for i := range changes {
		if !sub.wants(&changes[i]) {
			continue
		}
		added = true
		if sub.lagged {
			continue
		}
		ch := changes[i]
		ch.Seq = seq
		sub.queue = append(sub.queue, ch)
		if len(sub.queue) > sub.limit {
			sub.queue = nil
			sub.lagged = true
		}
	}
	if sub.lagged {
		sub.lagSeq = seq
	}
	sub.mu.Unlock()
	if added {
		select {
		case sub.wake <- struct{}{}:
		default:
		}
	}
}

func (sub *Subscription) pump() {
	defer close(sub.c)
	for {
		select {
		case <-sub.wake:
		case <-sub.stop:
			return
		}
		for {
			sub.mu.Lock()
			batch, lagged, lagSeq := sub.queue, sub.lagged, sub.lagSeq
			sub.queue, sub.lagged = nil, false
			sub.mu.Unlock()
			if lagged {
				batch = []Change{{Seq: lagSeq, Lagged: true}}
			}
			if len(batch) == 0 {
				break
			}
			for _, ch := range batch {
				select {
				case sub.c <- ch:
				case <-sub.stop:
					return
				}
			}
		}
	}
}

func (f *feed) publish(seq uint64, changes []Change) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for sub := range f.subs {
		sub.offer(seq, changes)
	}
}

func (f *feed) closeAll() {
	f.mu.Lock()
	subs := make([]*Subscription, 0, len(f.subs))
	for sub := range f.subs {
		subs = append(subs, sub)
	}
	f.mu.Unlock()
	for _, sub := range subs {
		sub.Close()
	}
}
