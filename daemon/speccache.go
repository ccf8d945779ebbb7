package daemon

import (
	"sync"
	"time"

	"gpud.dev/gpud/store"
)

// specCache keeps the decoded Spec of run and job records by record
// version, so hot reads (runs/list, the scheduler's snapshot) decode a
// record once per change instead of once per read. Values handed out are
// shared: callers must treat them as read-only (copy before changing a
// slice or pointer field).
type specCache struct {
	mu sync.Mutex
	m  map[string]cachedSpec
}

type cachedSpec struct {
	version uint64
	updated time.Time
	v       any
}

// cachedSpecOf returns r's decoded Spec, decoding it only when r changed
// since the last call. A Spec that does not decode yields T's zero value,
// as decodeSpec's callers on read paths already assume.
func cachedSpecOf[T any](c *specCache, r store.Record) T {
	key := string(r.Kind) + "/" + r.ID
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok && e.version == r.Version && e.updated.Equal(r.UpdatedAt) {
		if v, ok := e.v.(T); ok {
			return v
		}
	}
	v, _ := decodeSpec[T](r)
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]cachedSpec{}
	}
	c.m[key] = cachedSpec{version: r.Version, updated: r.UpdatedAt, v: v}
	c.mu.Unlock()
	return v
}

// forget drops a deleted record's entry.
func (c *specCache) forget(kind store.Kind, id string) {
	c.mu.Lock()
	delete(c.m, string(kind)+"/"+id)
	c.mu.Unlock()
}
