package store

import (
	"sort"
	"sync"
)

// indexField names a secondary index kept for every kind.
type indexField int

const (
	byStatus indexField = iota
	byProject
	byQueue
	byInstance
	byFleet
	byRun
	byTokenHash
	numIndexes
)

func (f indexField) String() string {
	return [...]string{"status", "project", "queue", "instance", "fleet", "run", "token_hash"}[f]
}

func fieldOf(r *Record, f indexField) string {
	switch f {
	case byStatus:
		return r.Status
	case byProject:
		return r.Project
	case byQueue:
		return r.Queue
	case byInstance:
		return r.Instance
	case byFleet:
		return r.Fleet
	case byRun:
		return r.Run
	case byTokenHash:
		return r.TokenHash
	}
	return ""
}

// table holds one kind's records and their secondary indexes. Records in
// recs are never modified after insertion; an update replaces the pointer.
type table struct {
	recs map[string]*Record
	idx  [numIndexes]map[string]map[string]struct{}
}

func newTable() *table {
	t := &table{recs: map[string]*Record{}}
	for i := range t.idx {
		t.idx[i] = map[string]map[string]struct{}{}
	}
	return t
}

func (t *table) put(r *Record) {
	if old := t.recs[r.ID]; old != nil {
		t.unindex(old)
	}
	t.recs[r.ID] = r
	for f := indexField(0); f < numIndexes; f++ {
		v := fieldOf(r, f)
		if v == "" {
			continue
		}
		set := t.idx[f][v]
		if set == nil {
			set = map[string]struct{}{}
			t.idx[f][v] = set
		}
		set[r.ID] = struct{}{}
	}
}

// load fills an empty table with recs, sizing every map first so that a
// rebuild of 100,000 records does not rehash its big index sets.
func (t *table) load(recs []*Record) {
	t.recs = make(map[string]*Record, len(recs))
	var counts [numIndexes]map[string]int
	for f := range counts {
		counts[f] = map[string]int{}
	}
	for _, r := range recs {
		t.recs[r.ID] = r
		for f := indexField(0); f < numIndexes; f++ {
			if v := fieldOf(r, f); v != "" {
				counts[f][v]++
			}
		}
	}
	for f := range counts {
		t.idx[f] = make(map[string]map[string]struct{}, len(counts[f]))
		for v, n := range counts[f] {
			t.idx[f][v] = make(map[string]struct{}, n)
		}
	}
	for _, r := range recs {
		for f := indexField(0); f < numIndexes; f++ {
			if v := fieldOf(r, f); v != "" {
				t.idx[f][v][r.ID] = struct{}{}
			}
		}
	}
}

func (t *table) remove(id string) {
	if old := t.recs[id]; old != nil {
		t.unindex(old)
		delete(t.recs, id)
	}
}

func (t *table) unindex(r *Record) {
	for f := indexField(0); f < numIndexes; f++ {
		v := fieldOf(r, f)
		if v == "" {
			continue
		}
		if set := t.idx[f][v]; set != nil {
			delete(set, r.ID)
			if len(set) == 0 {
				delete(t.idx[f], v)
			}
		}
	}
}

// memory is the in-memory image of the state file: what every read serves.
// Only the writer goroutine mutates it, under mu; readers take mu.RLock.
type memory struct {
	mu     sync.RWMutex
	tables map[Kind]*table
	kv     map[string]kvEntry
	seq    uint64 // sequence number of the last commit
}

func newMemory() *memory {
	m := &memory{tables: map[Kind]*table{}, kv: map[string]kvEntry{}}
	for _, k := range Kinds() {
		m.tables[k] = newTable()
	}
	return m
}

// Collection is the typed view of one kind: point reads and index queries
// served from memory, never from a bbolt transaction. Results are copies
// (see Record for the shared byte slices) sorted by ID.
type Collection struct {
	m    *memory
	kind Kind
}

// Kind returns the kind this collection holds.
func (c Collection) Kind() Kind { return c.kind }

// Get returns the record with id, or an error matching ErrNotFound.
func (c Collection) Get(id string) (Record, error) {
	c.m.mu.RLock()
	r := c.m.tables[c.kind].recs[id]
	c.m.mu.RUnlock()
	if r == nil {
		return Record{}, errorNotFound(c.kind, id)
	}
	return *r, nil
}

// Count returns the number of records of this kind.
func (c Collection) Count() int {
	c.m.mu.RLock()
	defer c.m.mu.RUnlock()
	return len(c.m.tables[c.kind].recs)
}

// List returns every record of this kind.
func (c Collection) List() []Record {
	c.m.mu.RLock()
	t := c.m.tables[c.kind]
	out := make([]Record, 0, len(t.recs))
	for _, r := range t.recs {
		out = append(out, *r)
	}
	c.m.mu.RUnlock()
	sortRecords(out)
	return out
}

func (c Collection) by(f indexField, value string) []Record {
	c.m.mu.RLock()
	t := c.m.tables[c.kind]
	set := t.idx[f][value]
	out := make([]Record, 0, len(set))
	for id := range set {
		out = append(out, *t.recs[id])
	}
	c.m.mu.RUnlock()
	sortRecords(out)
	return out
}

// ByStatus returns the records whose Status is one of statuses.
func (c Collection) ByStatus(statuses ...string) []Record {
	if len(statuses) == 1 {
		return c.by(byStatus, statuses[0])
	}
	var out []Record
	for _, s := range statuses {
		out = append(out, c.by(byStatus, s)...)
	}
	sortRecords(out)
	return out
}

// ByProject returns the records of project.
func (c Collection) ByProject(project string) []Record { return c.by(byProject, project) }

// ByQueue returns the records in queue.
func (c Collection) ByQueue(queue string) []Record { return c.by(byQueue, queue) }

// ByInstance returns the records bound to the instance (host) id.
func (c Collection) ByInstance(instance string) []Record { return c.by(byInstance, instance) }

// ByFleet returns the records of fleet.
func (c Collection) ByFleet(fleet string) []Record { return c.by(byFleet, fleet) }

// ByRun returns the records (jobs, replicas) of run.
func (c Collection) ByRun(run string) []Record { return c.by(byRun, run) }

// CountByStatus returns how many records have status, without copying them.
func (c Collection) CountByStatus(status string) int {
	c.m.mu.RLock()
	defer c.m.mu.RUnlock()
	return len(c.m.tables[c.kind].idx[byStatus][status])
}

func sortRecords(rs []Record) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
}

// Collections of the store, one per kind.

// Projects returns the projects collection.
func (s *Store) Projects() Collection { return s.Collection(KindProject) }

// Users returns the users collection; see also UserByToken.
func (s *Store) Users() Collection { return s.Collection(KindUser) }

// Members returns project memberships (ID "project/user", Role).
func (s *Store) Members() Collection { return s.Collection(KindMember) }

// Queues returns the queues collection.
func (s *Store) Queues() Collection { return s.Collection(KindQueue) }

// Fleets returns the fleets collection.
func (s *Store) Fleets() Collection { return s.Collection(KindFleet) }

// Instances returns the instances (hosts) collection.
func (s *Store) Instances() Collection { return s.Collection(KindInstance) }

// Runs returns the runs collection.
func (s *Store) Runs() Collection { return s.Collection(KindRun) }

// Jobs returns the jobs collection.
func (s *Store) Jobs() Collection { return s.Collection(KindJob) }

// Volumes returns the volumes collection.
func (s *Store) Volumes() Collection { return s.Collection(KindVolume) }

// Gateways returns the gateways collection.
func (s *Store) Gateways() Collection { return s.Collection(KindGateway) }

// Replicas returns the service replicas collection.
func (s *Store) Replicas() Collection { return s.Collection(KindReplica) }

// Secrets returns the secrets collection; values are in Record.Sealed.
func (s *Store) Secrets() Collection { return s.Collection(KindSecret) }

// Backends returns backend configurations; credentials are in Record.Sealed.
func (s *Store) Backends() Collection { return s.Collection(KindBackend) }

// Events returns the events collection (IDs sort by time; see NewEvent).
func (s *Store) Events() Collection { return s.Collection(KindEvent) }

// Usage returns per-queue usage windows (see AddUsage).
func (s *Store) Usage() Collection { return s.Collection(KindUsage) }

// Collection returns the view of kind k; k must be one of Kinds().
func (s *Store) Collection(k Kind) Collection { return Collection{m: s.mem, kind: k} }
