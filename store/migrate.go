package store

import (
	"encoding/json"
	"fmt"
	"strconv"

	"go.etcd.io/bbolt"
)

// SchemaVersion is the layout this code reads and writes. History:
//
//	1  records as plain JSON (RFC 3339 times), secret material in plaintext
//	   under "secret", instances in a bucket named "hosts", no usage,
//	   backends or kv buckets.
//	2  a format byte before compact JSON, Unix-nanosecond times, secret
//	   material sealed (AES-256-GCM), buckets named after Kind.
const SchemaVersion = 2

const (
	metaBucketName = "meta"
	schemaKeyName  = "schema"
)

// migration returns the step that upgrades a file from schema v to v+1
// inside the open transaction; all steps of one Open commit together or not
// at all.
func migration(v int) func(s *Store, tx *bbolt.Tx) error {
	switch v {
	case 1:
		return migrate1to2
	}
	return nil
}

// migrate creates the buckets of a new file, or upgrades an older one.
func (s *Store) migrate() error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists([]byte(metaBucketName))
		if err != nil {
			return fmt.Errorf("meta bucket: %w", err)
		}
		v := SchemaVersion
		if raw := meta.Get([]byte(schemaKeyName)); raw != nil {
			v, err = strconv.Atoi(string(raw))
			if err != nil {
				return fmt.Errorf("%w: schema version %q", ErrInvalid, raw)
			}
		}
		if v > SchemaVersion {
			return fmt.Errorf("%w: the file has schema %d; this gpud reads up to %d — upgrade gpud", ErrInvalid, v, SchemaVersion)
		}
		for ; v < SchemaVersion; v++ {
			s.log.Info().Int("from", v).Int("to", v+1).Msg("migrating state file")
			step := migration(v)
			if step == nil {
				return fmt.Errorf("%w: no migration from schema %d", ErrInvalid, v)
			}
			if err := step(s, tx); err != nil {
				return fmt.Errorf("migrate schema %d to %d: %w", v, v+1, err)
			}
		}
		for _, k := range append(Kinds(), KindKV) {
			if _, err := tx.CreateBucketIfNotExists([]byte(k)); err != nil {
				return fmt.Errorf("bucket %s: %w", k, err)
			}
		}
		return meta.Put([]byte(schemaKeyName), []byte(strconv.Itoa(SchemaVersion)))
	})
}

// v1Record is a record as schema 1 stored it.
type v1Record struct {
	Record
	Secret []byte `json:"secret,omitempty"`
}

// migrate1to2 renames hosts to instances, re-encodes every record and
// seals the secret material that schema 1 kept in plaintext.
func migrate1to2(s *Store, tx *bbolt.Tx) error {
	if hosts := tx.Bucket([]byte("hosts")); hosts != nil {
		if _, err := tx.CreateBucketIfNotExists([]byte(KindInstance)); err != nil {
			return err
		}
		err := hosts.ForEach(func(k, v []byte) error {
			return tx.Bucket([]byte(KindInstance)).Put(k, v)
		})
		if err != nil {
			return err
		}
		if err := tx.DeleteBucket([]byte("hosts")); err != nil {
			return err
		}
	}
	for _, kind := range Kinds() {
		b := tx.Bucket([]byte(kind))
		if b == nil {
			continue
		}
		type kv struct{ k, v []byte }
		var out []kv
		err := b.ForEach(func(k, v []byte) error {
			var old v1Record
			if err := json.Unmarshal(v, &old); err != nil {
				return fmt.Errorf("%s %q: %w", kind, k, err)
			}
			r := old.Record
			r.Kind, r.Sealed = kind, old.Secret
			if r.ID == "" {
				r.ID = string(k)
			}
			enc, err := s.encode(&r)
			if err != nil {
				return err
			}
			out = append(out, kv{append([]byte(nil), k...), enc})
			return nil
		})
		if err != nil {
			return err
		}
		for _, e := range out {
			if err := b.Put(e.k, e.v); err != nil {
				return err
			}
		}
	}
	return nil
}
