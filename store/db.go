package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Options configure Open. The zero value is the production default:
// encryption on with a key file beside the state file, a 1 s lock timeout.
type Options struct {
	// LockTimeout bounds the wait for another process's lock on the file
	// (default 1 s); after it Open fails with ErrLocked.
	LockTimeout time.Duration
	// KeyFile is the key file (default: state.key beside the state file),
	// created with mode 0600 on first open.
	KeyFile string
	// KeyEnv, if set, is the base64 of a 32-byte key used instead of the
	// key file (the server passes $GPUD_STATE_KEY).
	KeyEnv string
	// Plaintext turns encryption at rest off. Values already encrypted
	// cannot be read in this mode.
	Plaintext bool
	// LogsDir holds job logs (default: logs/ beside the state file).
	LogsDir string
	// LogLimit bounds each job's retained log bytes (default 50 MB).
	LogLimit int64
	// Logger receives the store's few log lines (open, migrations).
	Logger zerolog.Logger
}

// Store is gpud's durable state. All methods are safe for concurrent use.
type Store struct {
	path string
	db   *bbolt.DB
	keys *Keyring // nil in plaintext mode
	mem  *memory
	feed *feed
	kv   *KV
	logs *Logs
	log  zerolog.Logger

	reqs       chan *request
	quit       chan struct{}
	writerDone chan struct{}
	closeMu    sync.RWMutex
	commitMu   sync.Mutex // held from a batch's hand-off to the committer until memory has it; Check takes it
	nextSeq    uint64     // the writer's last assigned commit sequence number
	closed     bool

	stats struct {
		commits   atomic.Uint64
		mutations atomic.Uint64
	}
}

// Stats counts the writer's work since Open.
type Stats struct {
	Commits   uint64 // bbolt transactions committed (each fsyncs twice: data, then meta)
	Mutations uint64 // Apply calls committed
}

// Stats returns the writer's counters.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.stats.commits.Load(), Mutations: s.stats.mutations.Load()}
}

// Open opens (or creates) the state file at path, runs pending schema
// migrations, rebuilds the in-memory indexes and starts the writer. If
// another process holds the file it fails after Options.LockTimeout with an
// error matching ErrLocked.
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	dir := filepath.Dir(path)
	if opts.KeyFile == "" {
		opts.KeyFile = filepath.Join(dir, "state.key")
	}
	if opts.LogsDir == "" {
		opts.LogsDir = filepath.Join(dir, "logs")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	s := &Store{path: path, mem: newMemory(), feed: newFeed(), log: opts.Logger,
		reqs: make(chan *request, 4096), quit: make(chan struct{}), writerDone: make(chan struct{})}
	if !opts.Plaintext {
		k, err := LoadKeyring(opts.KeyFile, opts.KeyEnv)
		if err != nil {
			return nil, err
		}
		s.keys = k
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout:        opts.LockTimeout,
		NoFreelistSync: true,
		FreelistType:   bbolt.FreelistMapType,
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open %s: %w (is a gpud server running on it? stop it or use its API)", path, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s.db = db
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := s.load(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s.kv = &KV{s: s, locks: map[string]chan struct{}{}}
	s.logs = newLogs(opts.LogsDir, opts.LogLimit)
	go s.runWriter()
	return s, nil
}

// Path returns the state file's path.
func (s *Store) Path() string { return s.path }

// Keyring returns the store's keyring, or nil in plaintext mode.
func (s *Store) Keyring() *Keyring { return s.keys }

// Seq returns the sequence number of the last commit visible to reads.
func (s *Store) Seq() uint64 {
	s.mem.mu.RLock()
	defer s.mem.mu.RUnlock()
	return s.mem.seq
}

// Close commits the calls already queued, stops the writer, closes every
// subscription and the file. Calls after Close fail with ErrClosed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	close(s.quit)
	<-s.writerDone
	s.feed.closeAll()
	s.logs.close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close %s: %w", s.path, err)
	}
	return nil
}

// load rebuilds memory from the file in one short read transaction.
func (s *Store) load() error {
	return s.db.View(func(tx *bbolt.Tx) error {
		for _, k := range Kinds() {
			t := s.mem.tables[k]
			b := tx.Bucket([]byte(k))
			recs := make([]*Record, 0, b.Stats().KeyN)
			err := b.ForEach(func(key, v []byte) error {
				r, err := decodeRecord(k, v)
				if err != nil {
					return fmt.Errorf("%s %q: %w", k, key, err)
				}
				if len(r.Sealed) > 0 {
					pt, err := s.keys.open(r.Sealed, recordAAD(k, r.ID))
					if err != nil {
						return fmt.Errorf("%s %q: %w", k, r.ID, err)
					}
					r.Sealed = pt
				}
				recs = append(recs, &r)
				return nil
			})
			if err != nil {
				return err
			}
			t.load(recs)
		}
		return tx.Bucket([]byte(KindKV)).ForEach(func(key, v []byte) error {
			e, err := decodeKV(s.keys, string(key), v)
			if err != nil {
				return err
			}
			s.mem.kv[string(key)] = e
			return nil
		})
	})
}
