package store

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

type opKind uint8

const (
	opPut opKind = iota
	opCreate
	opUpdate
	opDelete
	opDeleteIf
	opReseal
	opKVPut
	opKVDelete
	opUsageAdd
)

// Mutation is one change submitted to Apply. Build it with Put, Create,
// Update, Delete, DeleteIfVersion, KVPut, KVDelete or AddUsage.
type Mutation struct {
	op      opKind
	rec     Record
	version uint64
	key     string
	value   []byte
	usage   map[string]float64
}

// Put writes r whatever is stored. The store sets Version (previous + 1),
// CreatedAt (kept from the previous record, or now) and UpdatedAt. If r
// equals the stored record apart from those fields nothing is written and
// the version stays.
func Put(r Record) Mutation { return Mutation{op: opPut, rec: r} }

// Create writes r only if no record of its kind has its ID; otherwise the
// Apply call fails with ErrExists.
func Create(r Record) Mutation { return Mutation{op: opCreate, rec: r} }

// Update writes r only if the stored record's version is r.Version (the
// version the caller read); otherwise the Apply call fails with a
// *ConflictError. A missing record has version 0.
func Update(r Record) Mutation { return Mutation{op: opUpdate, rec: r, version: r.Version} }

// Delete removes the record; deleting a missing record is not an error.
func Delete(k Kind, id string) Mutation {
	return Mutation{op: opDelete, rec: Record{Kind: k, ID: id}}
}

// DeleteIfVersion removes the record only if its stored version is version.
func DeleteIfVersion(k Kind, id string, version uint64) Mutation {
	return Mutation{op: opDeleteIf, rec: Record{Kind: k, ID: id}, version: version}
}

// KVPut stores value at key in the key-value namespace (see KV); value is
// encrypted at rest. The store keeps its own copy.
func KVPut(key string, value []byte) Mutation {
	return Mutation{op: opKVPut, key: key, value: append([]byte(nil), value...)}
}

// KVDelete removes key and every key below it ("a/b" removes "a/b" and
// "a/b/c"); removing nothing is not an error.
func KVDelete(key string) Mutation { return Mutation{op: opKVDelete, key: key} }

// AddUsage adds resource-seconds to a queue's usage window (the window is
// truncated to the hour). The writer sums in place, so concurrent callers
// never conflict. The record has ID "queue/unix-hour", Queue set, and Spec a
// JSON object of resource name to seconds.
func AddUsage(queue string, at time.Time, seconds map[string]float64) Mutation {
	w := at.UTC().Truncate(time.Hour)
	id := fmt.Sprintf("%s/%d", queue, w.Unix())
	cp := make(map[string]float64, len(seconds))
	for k, v := range seconds {
		cp[k] = v
	}
	return Mutation{op: opUsageAdd, rec: Record{Kind: KindUsage, ID: id, Queue: queue, CreatedAt: w}, usage: cp}
}

// NewEvent returns an event record about subject (kind and id) with an ID
// that sorts by time, so Events().List() is chronological.
func NewEvent(at time.Time, project string, subject Kind, subjectID, status, reason string) Record {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand never fails on Linux; a zero suffix would still be unique enough with the timestamp
	return Record{
		Kind:    KindEvent,
		ID:      fmt.Sprintf("%016x-%s", at.UnixNano(), hex.EncodeToString(rnd[:])),
		Project: project, Status: status, Reason: reason,
		Name:      string(subject) + "/" + subjectID,
		CreatedAt: at,
	}
}

// Result tells an Apply caller what was committed.
type Result struct {
	// Seq is the commit sequence number of the transaction that held the
	// mutations; change feed entries carry the same number.
	Seq uint64
	// Versions holds, per mutation, the record version after the commit
	// (0 for deletes and key-value mutations).
	Versions []uint64
}
