// Package state is the agent's own small durable record: one bbolt file
// with a record per job (what of its spec adoption needs, its status and
// runtime handle), so a restarted agent knows which jobs it ran and can
// re-adopt them, stop them with their grace and sample their GPUs.
//
// state must not import daemon, store, sched, plugins, proxy, nor the agent
// package itself. Nothing that may hold a secret is written: not the
// environment (resolved secrets), not the commands (they may interpolate
// secrets), not registry credentials; see Redact. A job is never restarted
// from this file (the server dispatches a retry afresh), so nothing more is
// needed.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

var bucketJobs = []byte("jobs")

// schemaVersion is written into every record; a newer agent can migrate.
const schemaVersion = 1

// Record is everything the agent keeps about one job.
type Record struct {
	Version int `json:"v"`
	// Spec is the job's spec; Put writes only Redact(Spec).
	Spec   api.JobSpec    `json:"spec"`
	Status api.JobStatus  `json:"status"`
	Handle runtime.Handle `json:"handle"`
	// StopRequested survives a restart so the exit is still reported as
	// a stop, not a failure.
	StopRequested bool `json:"stop_requested,omitempty"`
	// Removed is when the agent removed what the finished job left on the
	// host (its container, or its files and output) after the job
	// retention; the record itself, the job's final status, stays a while
	// longer so a server that was away still reads how it ended.
	Removed time.Time `json:"removed,omitzero"`
}

// DB is the open state file. It is safe for concurrent use.
type DB struct {
	db *bolt.DB
}

// ErrNotFound is returned for a job the file has no record of.
var ErrNotFound = errors.New("no such job")

// Open opens (creating if needed) the state file at path with mode 0600.
// It fails fast if another agent holds the file.
func Open(path string) (*DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("agent state %s: %w (is another agent using this data dir?)", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketJobs)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("agent state %s: %w", path, err)
	}
	return &DB{db: db}, nil
}

// Close closes the file.
func (d *DB) Close() error { return d.db.Close() }

// Redact keeps of spec what adoption, stop and metrics read after an agent
// restart (id, run, image, GPUs, ports, stop grace, gang, labels) and drops
// everything else, so a field added later that carries a secret is not
// written by default.
func Redact(spec api.JobSpec) api.JobSpec {
	return api.JobSpec{
		ID: spec.ID, RunName: spec.RunName, Image: spec.Image, GPUs: spec.GPUs, Ports: spec.Ports,
		HostNetwork: spec.HostNetwork, StopDuration: spec.StopDuration, Cluster: spec.Cluster, Labels: spec.Labels,
	}
}

// Put writes rec durably (fsync before it returns), its spec redacted
// (Redact): no environment, commands or credentials reach the disk.
func (d *DB) Put(rec Record) error {
	rec.Version = schemaVersion
	rec.Spec = Redact(rec.Spec)
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("agent state: %w", err)
	}
	err = d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJobs).Put([]byte(rec.Spec.ID), b)
	})
	if err != nil {
		return fmt.Errorf("agent state: put %s: %w", rec.Spec.ID, err)
	}
	return nil
}

// Delete removes the job's record; deleting a missing one is not an error.
func (d *DB) Delete(id string) error {
	err := d.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketJobs).Delete([]byte(id)) })
	if err != nil {
		return fmt.Errorf("agent state: delete %s: %w", id, err)
	}
	return nil
}

// All returns every record, ordered by job id. The slice is the caller's.
func (d *DB) All() ([]Record, error) {
	var out []Record
	err := d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("record %s: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("agent state: %w", err)
	}
	return out, nil
}
