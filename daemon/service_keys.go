package daemon

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// Per-service keys (dstack's service tokens): a bearer key that opens one
// service of one project, and nothing else (not the API, not the
// project's model endpoint, not another service). They live in the
// store's KV namespace, encrypted at rest like every value there:
//
//	servicekeys/hash/<sha256 hex>             -> serviceKeyEntry (JSON)
//	servicekeys/names/<project>/<run>/<name>  -> the sha256 hex
//	servicekeys/used/<sha256 hex>             -> last use (RFC 3339)
//
// Only the SHA-256 of a key is kept: a key is 32 random bytes, so a plain
// hash is as good as a slow one, and a request is checked by one map
// lookup of its hash (the hash of a guess tells nothing of the key) and a
// constant-time comparison. Nothing here logs a key or puts it in an
// event.

const (
	serviceKeysDir  = "servicekeys"
	maxServiceKeys  = 100             // per service: bounds the store
	keyUseEvery     = time.Minute     // how often last use is written per key
	serviceKeyBytes = 32              // of randomness in a key
	keyNameDefault  = "key-"          // + 8 hex of its hash when none is given
	keyCheckTimeout = 5 * time.Second // for the last-use write
)

// serviceKeyEntry is what the store keeps of a key.
type serviceKeyEntry struct {
	Hash    string `json:"hash"`
	Project string `json:"project"`
	// ProjectCreated binds the key to this project, not to a project of
	// the same name made after it was deleted.
	ProjectCreated int64  `json:"project_created"`
	Run            string `json:"run"`
	Name           string `json:"name"`
	CreatedBy      string `json:"created_by"`
	// CreatorCreated binds the key to its maker's account, not to a user
	// of the same name made after that one was deleted.
	CreatorCreated int64     `json:"creator_created"`
	CreatedAt      time.Time `json:"created_at"`
}

func serviceKeyHashKey(hash string) string { return serviceKeysDir + "/hash/" + hash }
func serviceKeyUsedKey(hash string) string { return serviceKeysDir + "/used/" + hash }
func serviceKeyNamesDir(project, run string) string {
	return serviceKeysDir + "/names/" + project + "/" + run
}
func serviceKeyNameKey(project, run, name string) string {
	return serviceKeyNamesDir(project, run) + "/" + name
}

// newServiceKey returns a fresh key and its hash.
func newServiceKey() (key, hash string, err error) {
	b := make([]byte, serviceKeyBytes)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	key = api.ServiceKeyPrefix + base64.RawURLEncoding.EncodeToString(b)
	return key, store.HashToken(key), nil
}

// serviceKeyEntryOf is the entry of the key whose hash is hash.
func (s *Server) serviceKeyEntryOf(hash string) (serviceKeyEntry, bool) {
	b, err := s.store.KV().Load(s.ctx, serviceKeyHashKey(hash))
	if err != nil {
		return serviceKeyEntry{}, false
	}
	var e serviceKeyEntry
	if json.Unmarshal(b, &e) != nil {
		return serviceKeyEntry{}, false
	}
	return e, true
}

// serviceKeyValid finds the entry of key, if key is a live key: stored,
// of a project that still exists as the one it was made in, made by a
// user (that account, not a namesake) who is still a member of it (a key never outlives its maker's
// access to the project).
func (s *Server) serviceKeyValid(key string) (serviceKeyEntry, bool) {
	if !strings.HasPrefix(key, api.ServiceKeyPrefix) {
		return serviceKeyEntry{}, false
	}
	hash := store.HashToken(key)
	e, ok := s.serviceKeyEntryOf(hash)
	if !ok || subtle.ConstantTimeCompare([]byte(e.Hash), []byte(hash)) != 1 {
		return serviceKeyEntry{}, false
	}
	p, err := s.store.Projects().Get(e.Project)
	if err != nil || p.CreatedAt.UnixNano() != e.ProjectCreated {
		return serviceKeyEntry{}, false
	}
	u, err := s.store.Users().Get(e.CreatedBy)
	if err != nil || u.CreatedAt.UnixNano() != e.CreatorCreated {
		return serviceKeyEntry{}, false
	}
	role, err := s.projectRole(caller{name: u.Name, admin: u.Role == api.RoleAdmin}, e.Project)
	if err != nil || roleRank(role) < roleRank(api.RoleUser) {
		return serviceKeyEntry{}, false
	}
	return e, true
}

// serviceKeyOpens says whether key is a live key of project's service run,
// and notes its use.
func (s *Server) serviceKeyOpens(key, project, run string) bool {
	e, ok := s.serviceKeyValid(key)
	if !ok || e.Project != project || e.Run != run || run == "" {
		return false
	}
	s.noteKeyUse(e.Hash)
	return true
}

// keyUses throttles the last-use writes: hash -> unix nanos of the last.
// Keys are random, so one map serves every server of the process.
var keyUses sync.Map

// noteKeyUse records that the key hash opened its service, at most once
// per keyUseEvery, off the request's path.
func (s *Server) noteKeyUse(hash string) {
	now := s.now()
	v, _ := keyUses.LoadOrStore(hash, new(atomic.Int64))
	last := v.(*atomic.Int64)
	prev := last.Load()
	if now.UnixNano()-prev < int64(keyUseEvery) || !last.CompareAndSwap(prev, now.UnixNano()) {
		return
	}
	if s.ctx.Err() != nil {
		return // stopping: no new work
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, keyCheckTimeout)
		defer cancel()
		if err := s.store.KV().Store(ctx, serviceKeyUsedKey(hash), []byte(now.UTC().Format(time.RFC3339Nano))); err != nil {
			return // the server is stopping; last use is advice
		}
		// A revoke that ran meanwhile removed the key: take the use with it.
		if _, ok := s.serviceKeyEntryOf(hash); !ok {
			_ = s.store.KV().Delete(ctx, serviceKeyUsedKey(hash))
		}
	}()
}

// serviceKeysOf lists the entries of project's service run, by name.
func (s *Server) serviceKeysOf(ctx context.Context, project, run string) ([]serviceKeyEntry, error) {
	names, err := s.store.KV().List(ctx, serviceKeyNamesDir(project, run), false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []serviceKeyEntry
	for _, k := range names {
		hash, err := s.store.KV().Load(ctx, k)
		if err != nil {
			continue // revoked meanwhile
		}
		if e, ok := s.serviceKeyEntryOf(string(hash)); ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// serviceKeyOut is what a listing shows of a key: never the key.
func (s *Server) serviceKeyOut(ctx context.Context, e serviceKeyEntry) api.ServiceKey {
	out := api.ServiceKey{Name: e.Name, Project: e.Project, Run: e.Run, CreatedBy: e.CreatedBy, CreatedAt: e.CreatedAt}
	if b, err := s.store.KV().Load(ctx, serviceKeyUsedKey(e.Hash)); err == nil {
		if t, err := time.Parse(time.RFC3339Nano, string(b)); err == nil {
			out.LastUsedAt = &t
		}
	}
	return out
}

// defaultKeyName names a key made without --name.
func defaultKeyName(hash string) string { return keyNameDefault + hash[:8] }
