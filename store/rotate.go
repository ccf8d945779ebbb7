package store

import (
	"context"
	"fmt"
)

// resealChunk bounds the mutations of one re-encryption transaction.
const resealChunk = 5000

// Reencrypt rewrites every sealed value (records' Sealed and every
// key-value value) with the keyring's current primary key, in transactions
// of up to resealChunk values, and returns how many it rewrote. After a
// Keyring.Rotate this leaves no value sealed with an older key; it also
// seals values written while the store ran in plaintext mode. Contents,
// versions and timestamps do not change, and the change feed stays quiet.
func (s *Store) Reencrypt(ctx context.Context) (int, error) {
	if s.keys == nil {
		return 0, fmt.Errorf("%w: reencrypt needs encryption on (the store was opened in plaintext mode)", ErrInvalid)
	}
	var muts []Mutation
	s.mem.mu.RLock()
	for _, k := range Kinds() {
		for id, r := range s.mem.tables[k].recs {
			if len(r.Sealed) > 0 {
				muts = append(muts, Mutation{op: opReseal, rec: Record{Kind: k, ID: id}})
			}
		}
	}
	for key := range s.mem.kv {
		muts = append(muts, Mutation{op: opReseal, key: key})
	}
	s.mem.mu.RUnlock()
	for i := 0; i < len(muts); i += resealChunk {
		end := min(i+resealChunk, len(muts))
		if _, err := s.Apply(ctx, muts[i:end]...); err != nil {
			return i, fmt.Errorf("reencrypt: %w", err)
		}
	}
	return len(muts), nil
}
