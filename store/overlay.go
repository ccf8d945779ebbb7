package store

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

type okey struct {
	kind Kind
	id   string
}

// entry is the staged state of one record or key-value key: rec (or kv) is
// nil when it is deleted; enc holds the bytes to write.
type entry struct {
	rec *Record
	kv  *kvEntry
	enc []byte
}

// overlay stages the changes of one transaction on top of memory (and, for
// one Apply call, on top of the transaction's overlay), so that a failing
// call can be dropped without touching the others.
type overlay struct {
	parent  *overlay
	mem     *memory
	entries map[okey]*entry
	order   []okey
	changes []Change
}

func newOverlay(mem *memory, parent *overlay) *overlay {
	return newOverlaySized(mem, parent, 0)
}

func newOverlaySized(mem *memory, parent *overlay, n int) *overlay {
	return &overlay{mem: mem, parent: parent, entries: make(map[okey]*entry, n), order: make([]okey, 0, n)}
}

// record returns the current record visible through the overlay. The
// writer goroutine is memory's only mutator, so it reads it without locks.
func (o *overlay) record(k Kind, id string) *Record {
	for x := o; x != nil; x = x.parent {
		if e, ok := x.entries[okey{k, id}]; ok {
			return e.rec
		}
	}
	return o.mem.tables[k].recs[id]
}

func (o *overlay) kvGet(key string) *kvEntry {
	for x := o; x != nil; x = x.parent {
		if e, ok := x.entries[okey{KindKV, key}]; ok {
			return e.kv
		}
	}
	if e, ok := o.mem.kv[key]; ok {
		return &e
	}
	return nil
}

// kvKeysUnder returns the live keys equal to key or below it.
func (o *overlay) kvKeysUnder(key string) []string {
	seen := map[string]bool{}
	var out []string
	match := func(k string) bool { return k == key || key == "" || strings.HasPrefix(k, key+"/") }
	for x := o; x != nil; x = x.parent {
		for ok := range x.entries {
			if ok.kind == KindKV && match(ok.id) && !seen[ok.id] {
				seen[ok.id] = true
				out = append(out, ok.id)
			}
		}
	}
	for k := range o.mem.kv {
		if match(k) && !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	live := out[:0]
	for _, k := range out {
		if o.kvGet(k) != nil {
			live = append(live, k)
		}
	}
	return live
}

func (o *overlay) set(k okey, e *entry) {
	if _, ok := o.entries[k]; !ok {
		o.order = append(o.order, k)
	}
	o.entries[k] = e
}

// merge moves a child's staged changes into o (nil: staged in o already).
func (o *overlay) merge(child *overlay) {
	if child == nil {
		return
	}
	for _, k := range child.order {
		o.set(k, child.entries[k])
	}
	o.changes = append(o.changes, child.changes...)
}

// stage applies muts to a child overlay of o. On error the child is
// discarded and o is untouched.
func (s *Store) stage(o *overlay, muts []Mutation, now time.Time) (*overlay, []uint64, error) {
	if len(muts) == 1 {
		// A single mutation fails before it stages anything, so it can go
		// straight into o: no child overlay to allocate and merge.
		v, err := s.stageOne(o, &muts[0], now)
		if err != nil {
			return nil, nil, err
		}
		return nil, []uint64{v}, nil
	}
	if len(o.order) == 0 && len(o.changes) == 0 {
		// The first call of a batch (a scheduler plan, typically) stages
		// straight into o; if it fails, o is emptied again.
		versions, err := s.stageAll(o, muts, now)
		if err != nil {
			clear(o.entries)
			o.order, o.changes = o.order[:0], nil
			return nil, nil, err
		}
		return nil, versions, nil
	}
	c := newOverlay(s.mem, o)
	versions, err := s.stageAll(c, muts, now)
	if err != nil {
		return nil, nil, err
	}
	return c, versions, nil
}

func (s *Store) stageAll(c *overlay, muts []Mutation, now time.Time) ([]uint64, error) {
	versions := make([]uint64, len(muts))
	for i := range muts {
		v, err := s.stageOne(c, &muts[i], now)
		if err != nil {
			return nil, err
		}
		versions[i] = v
	}
	return versions, nil
}

func (s *Store) stageOne(c *overlay, m *Mutation, now time.Time) (uint64, error) {
	switch m.op {
	case opKVPut:
		key, err := cleanKey(m.key)
		if err != nil {
			return 0, err
		}
		e := &kvEntry{value: m.value, modified: now}
		enc, err := encodeKV(s.keys, key, e)
		if err != nil {
			return 0, err
		}
		c.set(okey{KindKV, key}, &entry{kv: e, enc: enc})
		c.changes = append(c.changes, Change{Kind: KindKV, ID: key})
		return 0, nil
	case opKVDelete:
		key, err := cleanKeyOrRoot(m.key)
		if err != nil {
			return 0, err
		}
		for _, k := range c.kvKeysUnder(key) {
			c.set(okey{KindKV, k}, &entry{})
			c.changes = append(c.changes, Change{Kind: KindKV, ID: k, Deleted: true})
		}
		return 0, nil
	}
	if m.op == opReseal && m.key != "" {
		if e := c.kvGet(m.key); e != nil {
			enc, err := encodeKV(s.keys, m.key, e)
			if err != nil {
				return 0, err
			}
			c.set(okey{KindKV, m.key}, &entry{kv: e, enc: enc})
		}
		return 0, nil
	}
	r := m.rec
	if err := validateRecord(&r); err != nil {
		return 0, err
	}
	cur := c.record(r.Kind, r.ID)
	var have uint64
	if cur != nil {
		have = cur.Version
	}
	switch m.op {
	case opDelete, opDeleteIf:
		if m.op == opDeleteIf && have != m.version {
			return 0, &ConflictError{Kind: r.Kind, ID: r.ID, Want: m.version, Have: have}
		}
		if cur != nil {
			c.set(okey{r.Kind, r.ID}, &entry{})
			c.changes = append(c.changes, Change{Kind: r.Kind, ID: r.ID, Deleted: true, Record: *cur})
		}
		return 0, nil
	case opCreate:
		if cur != nil {
			return 0, fmt.Errorf("%s %q: %w", r.Kind, r.ID, ErrExists)
		}
	case opUpdate:
		if have != m.version {
			return 0, &ConflictError{Kind: r.Kind, ID: r.ID, Want: m.version, Have: have}
		}
	case opReseal:
		if cur == nil {
			return 0, nil
		}
		enc, err := s.encode(cur)
		if err != nil {
			return 0, err
		}
		c.set(okey{r.Kind, r.ID}, &entry{rec: cur, enc: enc})
		return cur.Version, nil
	case opUsageAdd:
		sum := map[string]float64{}
		if cur != nil && len(cur.Spec) > 0 {
			if err := json.Unmarshal(cur.Spec, &sum); err != nil {
				return 0, fmt.Errorf("%w: usage %q: %v", ErrInvalid, r.ID, err)
			}
		}
		for k, v := range m.usage {
			sum[k] += v
		}
		spec, err := json.Marshal(sum)
		if err != nil {
			return 0, fmt.Errorf("usage %q: %w", r.ID, err)
		}
		r.Spec = spec
	}
	if cur != nil && sameContent(cur, &r) {
		return cur.Version, nil
	}
	r.Version = have + 1
	r.UpdatedAt = now
	switch {
	case cur != nil:
		r.CreatedAt = cur.CreatedAt
	case r.CreatedAt.IsZero():
		r.CreatedAt = now
	}
	r.CreatedAt = r.CreatedAt.UTC()
	enc, err := s.encode(&r)
	if err != nil {
		return 0, err
	}
	c.set(okey{r.Kind, r.ID}, &entry{rec: &r, enc: enc})
	c.changes = append(c.changes, Change{Kind: r.Kind, ID: r.ID, Record: r})
	return r.Version, nil
}

// encode seals r.Sealed and encodes the record for bbolt.
func (s *Store) encode(r *Record) ([]byte, error) {
	var sealed []byte
	if len(r.Sealed) > 0 {
		var err error
		sealed, err = sealWith(s.keys, r.Sealed, recordAAD(r.Kind, r.ID))
		if err != nil {
			return nil, fmt.Errorf("seal %s %q: %w", r.Kind, r.ID, err)
		}
	}
	return encodeRecord(r, sealed)
}

func recordAAD(k Kind, id string) []byte { return []byte(string(k) + "\x00" + id) }
