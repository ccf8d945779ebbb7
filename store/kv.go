package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
)

// kvEntry is one key-value value in memory (plaintext).
type kvEntry struct {
	value    []byte
	modified time.Time
}

// encodeKV lays out a stored key-value value: 8 bytes of modification time
// (Unix nanoseconds, big endian) then the sealed value.
func encodeKV(k *Keyring, key string, e *kvEntry) ([]byte, error) {
	sealed, err := sealWith(k, e.value, recordAAD(KindKV, key))
	if err != nil {
		return nil, fmt.Errorf("seal kv %q: %w", key, err)
	}
	out := make([]byte, 8, 8+len(sealed))
	binary.BigEndian.PutUint64(out, uint64(e.modified.UnixNano()))
	return append(out, sealed...), nil
}

func decodeKV(k *Keyring, key string, b []byte) (kvEntry, error) {
	if len(b) < 9 {
		return kvEntry{}, fmt.Errorf("%w: kv %q: value too short", ErrInvalid, key)
	}
	v, err := k.open(b[8:], recordAAD(KindKV, key))
	if err != nil {
		return kvEntry{}, fmt.Errorf("kv %q: %w", key, err)
	}
	return kvEntry{value: v, modified: time.Unix(0, int64(binary.BigEndian.Uint64(b[:8]))).UTC()}, nil
}

// cleanKey normalizes a key-value key: segments separated by "/", no empty,
// "." or ".." segments, no NUL or backslash, leading and trailing slashes
// dropped. It rejects keys it cannot normalize rather than guess.
func cleanKey(key string) (string, error) {
	k, err := cleanKeyOrRoot(key)
	if err == nil && k == "" {
		err = fmt.Errorf("%w: empty key", ErrInvalid)
	}
	return k, err
}

// cleanKeyOrRoot is cleanKey that also accepts the root ("" or "/").
func cleanKeyOrRoot(key string) (string, error) {
	if len(key) > 4096 {
		return "", fmt.Errorf("%w: key longer than 4096 bytes", ErrInvalid)
	}
	k := strings.Trim(key, "/")
	if k == "" {
		return "", nil
	}
	for _, seg := range strings.Split(k, "/") {
		switch {
		case seg == "":
			return "", fmt.Errorf("%w: key %q has an empty segment", ErrInvalid, key)
		case seg == "." || seg == "..":
			return "", fmt.Errorf("%w: key %q has a %q segment", ErrInvalid, key, seg)
		case strings.ContainsAny(seg, "\x00\\"):
			return "", fmt.Errorf("%w: key %q contains NUL or backslash", ErrInvalid, key)
		}
	}
	return k, nil
}

// KV is the store's key-value namespace with the semantics of certmagic's
// Storage: Load, List and Stat of a missing key return an error matching
// fs.ErrNotExist; Delete removes a key and everything below it. Reads come
// from memory; writes go through the store's writer and are durable when
// they return. Values are encrypted at rest (TLS private keys live here).
// Locks are held in this process: the state file is opened by one process
// only, so they are exclusive for every user of the file.
type KV struct {
	s     *Store
	mu    sync.Mutex
	locks map[string]chan struct{}
}

var _ certmagic.Storage = (*KV)(nil)
var _ certmagic.TryLocker = (*KV)(nil)

// KV returns the store's key-value namespace (one per store).
func (s *Store) KV() *KV { return s.kv }

// Store puts value at key, durably.
func (kv *KV) Store(ctx context.Context, key string, value []byte) error {
	_, err := kv.s.Apply(ctx, KVPut(key, value))
	return err
}

// Load returns a copy of the value at key.
func (kv *KV) Load(_ context.Context, key string) ([]byte, error) {
	k, err := cleanKey(key)
	if err != nil {
		return nil, err
	}
	kv.s.mem.mu.RLock()
	e, ok := kv.s.mem.kv[k]
	kv.s.mem.mu.RUnlock()
	if !ok {
		return nil, errorNotFound(KindKV, k)
	}
	return append([]byte(nil), e.value...), nil
}

// Delete removes key and every key below it; a missing key is not an error.
func (kv *KV) Delete(ctx context.Context, key string) error {
	_, err := kv.s.Apply(ctx, KVDelete(key))
	return err
}

// Exists reports whether key is a value or a directory of values.
func (kv *KV) Exists(ctx context.Context, key string) bool {
	_, err := kv.Stat(ctx, key)
	return err == nil
}

// List returns the keys directly below dir (files and directories), or, if
// recursive, every key and directory below it, sorted. A dir with nothing
// below it returns an error matching fs.ErrNotExist.
func (kv *KV) List(_ context.Context, dir string, recursive bool) ([]string, error) {
	d, err := cleanKeyOrRoot(dir)
	if err != nil {
		return nil, err
	}
	prefix := ""
	if d != "" {
		prefix = d + "/"
	}
	seen := map[string]bool{}
	kv.s.mem.mu.RLock()
	for k := range kv.s.mem.kv {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		rest := k[len(prefix):]
		parts := strings.Split(rest, "/")
		if !recursive {
			seen[prefix+parts[0]] = true
			continue
		}
		for i := range parts {
			seen[prefix+strings.Join(parts[:i+1], "/")] = true
		}
	}
	kv.s.mem.mu.RUnlock()
	if len(seen) == 0 {
		return nil, fmt.Errorf("list %q: %w", dir, fs.ErrNotExist)
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

// Stat describes key: a value (IsTerminal) or a directory of values.
func (kv *KV) Stat(_ context.Context, key string) (certmagic.KeyInfo, error) {
	k, err := cleanKeyOrRoot(key)
	if err != nil {
		return certmagic.KeyInfo{}, err
	}
	kv.s.mem.mu.RLock()
	defer kv.s.mem.mu.RUnlock()
	if e, ok := kv.s.mem.kv[k]; ok {
		return certmagic.KeyInfo{Key: k, Modified: e.modified, Size: int64(len(e.value)), IsTerminal: true}, nil
	}
	prefix := k + "/"
	var newest time.Time
	found := false
	for name, e := range kv.s.mem.kv {
		if k == "" || strings.HasPrefix(name, prefix) {
			found = true
			if e.modified.After(newest) {
				newest = e.modified
			}
		}
	}
	if !found {
		return certmagic.KeyInfo{}, errorNotFound(KindKV, k)
	}
	return certmagic.KeyInfo{Key: k, Modified: newest, IsTerminal: false}, nil
}

// Lock blocks until the named lock is free or ctx ends.
func (kv *KV) Lock(ctx context.Context, name string) error {
	for {
		kv.mu.Lock()
		held, ok := kv.locks[name]
		if !ok {
			kv.locks[name] = make(chan struct{})
			kv.mu.Unlock()
			return nil
		}
		kv.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return fmt.Errorf("lock %q: %w", name, ctx.Err())
		}
	}
}

// TryLock takes the named lock if it is free and reports whether it did.
func (kv *KV) TryLock(_ context.Context, name string) (bool, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if _, ok := kv.locks[name]; ok {
		return false, nil
	}
	kv.locks[name] = make(chan struct{})
	return true, nil
}

// Unlock releases the named lock; unlocking a free lock is an error.
func (kv *KV) Unlock(_ context.Context, name string) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	held, ok := kv.locks[name]
	if !ok {
		return fmt.Errorf("unlock %q: %w: lock is not held", name, ErrInvalid)
	}
	delete(kv.locks, name)
	close(held)
	return nil
}
