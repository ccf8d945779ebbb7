package daemon

import (
	"sync"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// specCache keeps the decoded Spec of run, job and instance records by
// record version, so hot reads (runs/list, the scheduler's snapshot)
// decode a record once per change instead of once per read. Values handed
// out are shared: callers must treat them as read-only (to change one,
// decode a fresh copy with jobSpecOf or runSpecOf).
type specCache struct {
	mu sync.Mutex
	// m holds, per record, one decoding per tag of its current version.
	m map[string][]cachedSpec
}

type cachedSpec struct {
	version uint64
	updated time.Time
	tag     string
	v       any
	err     error
}

// cachedSpecOf returns r's decoded Spec, decoding it only when r changed
// since the last call. A Spec that does not decode yields its
// *corruptRecordError every time until the record changes; fresh reports
// whether this call decoded it (so the error is logged once per version).
func cachedSpecOf[T any](c *specCache, r store.Record) (v T, fresh bool, err error) {
	return cachedOf(c, r, "", decodeSpec[T])
}

// cachedOf is cachedSpecOf with another decoding of r (tag names it in the
// cache, beside the plain Spec decoding).
func cachedOf[T any](c *specCache, r store.Record, tag string, decode func(store.Record) (T, error)) (v T, fresh bool, err error) {
	key := string(r.Kind) + "/" + r.ID
	current := func(e cachedSpec) bool { return e.version == r.Version && e.updated.Equal(r.UpdatedAt) }
	c.mu.Lock()
	for _, e := range c.m[key] {
		if e.tag == tag && current(e) {
			if v, ok := e.v.(T); ok {
				c.mu.Unlock()
				return v, false, e.err
			}
		}
	}
	c.mu.Unlock()
	v, err = decode(r)
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string][]cachedSpec{}
	}
	// Keep the other tags' decodings of this version (a run is read as
	// its Spec, by the gateway and by the model routes on one request):
	// one tag must not evict another.
	var keep []cachedSpec
	for _, e := range c.m[key] {
		if e.tag != tag && current(e) {
			keep = append(keep, e)
		}
	}
	c.m[key] = append(keep, cachedSpec{version: r.Version, updated: r.UpdatedAt, tag: tag, v: v, err: err})
	c.mu.Unlock()
	return v, true, err
}

// forget drops a deleted record's entry.
func (c *specCache) forget(kind store.Kind, id string) {
	c.mu.Lock()
	delete(c.m, string(kind)+"/"+id)
	c.mu.Unlock()
}

// cachedSpecFor is the Server's decode-once read of a record: a corrupt Spec
// is logged (once per record version, with the record's kind and id) and
// returned as an error, never handed out as a zero value.
func cachedSpecFor[T any](s *Server, r store.Record) (T, error) {
	return cachedFor(s, r, "", decodeSpec[T])
}

// cachedFor is cachedSpecFor with another decoding (see cachedOf).
func cachedFor[T any](s *Server, r store.Record, tag string, decode func(store.Record) (T, error)) (T, error) {
	v, fresh, err := cachedOf(&s.specs, r, tag, decode)
	if err != nil && fresh {
		ev := s.log.Error().Err(err).Str("kind", string(r.Kind)).Str("id", r.ID)
		if r.Run != "" {
			ev = ev.Str("run", r.Run)
		}
		ev.Msg("a stored record does not decode; the server leaves it alone (restore state.db from a backup, or delete the record)")
	}
	return v, err
}

// jobSpec is the cached, read-only Spec of a job record.
func (s *Server) jobSpec(j store.Record) (jobRecordSpec, error) {
	return cachedSpecFor[jobRecordSpec](s, j)
}

// runSpec is the cached, read-only Spec of a run record.
func (s *Server) runSpec(r store.Record) (runState, error) { return cachedSpecFor[runState](s, r) }

// instanceSpec is the cached, read-only Spec of an instance record.
func (s *Server) instanceSpec(r store.Record) (instanceState, error) {
	return cachedSpecFor[instanceState](s, r)
}

// queueSpec is queueSpecOf decoded once per record version; a corrupt
// queue is logged once.
func (s *Server) queueSpec(r store.Record) (api.QueueSpec, error) {
	return cachedFor(s, r, "queue", queueSpecOf)
}
