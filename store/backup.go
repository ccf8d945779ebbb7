package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"gpud.dev/gpud/internal/atomicfile"
)

// Backup writes a consistent snapshot of the state file to w while the
// store keeps serving (one bbolt read transaction; writers are not blocked).
// Sealed values stay sealed: a restore needs the same key file. While it
// runs, a commit that must grow the file's memory map waits for it (bbolt
// remaps only without readers), so back up large files off peak.
func (s *Store) Backup(ctx context.Context, w io.Writer) (int64, error) {
	var n int64
	err := s.db.View(func(tx *bbolt.Tx) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	if err != nil {
		return n, fmt.Errorf("backup: %w", err)
	}
	return n, nil
}

// BackupFile writes a snapshot to path (atomically: a temporary file, fsync,
// rename), so a partial backup never looks complete.
func (s *Store) BackupFile(ctx context.Context, path string) (int64, error) {
	var n int64
	err := atomicfile.Write(path, 0o600, func(w io.Writer) error {
		var err error
		n, err = s.Backup(ctx, w)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	return n, nil
}

// Restore replaces the state file at statePath with the backup at
// backupPath. The server must be stopped: Restore fails with ErrLocked if a
// process holds statePath. The backup is checked to be a gpud state file of
// a schema this code can read before anything is replaced; the replaced file
// is kept as statePath + ".before-restore".
func Restore(backupPath, statePath string) error {
	if err := checkBackup(backupPath); err != nil {
		return err
	}
	if _, err := os.Stat(statePath); err == nil {
		db, err := bbolt.Open(statePath, 0o600, &bbolt.Options{Timeout: time.Second})
		if errors.Is(err, bolterrors.ErrTimeout) {
			return fmt.Errorf("restore %s: %w; stop the server first", statePath, ErrLocked)
		}
		if err == nil {
			db.Close()
		}
		if err := os.Rename(statePath, statePath+".before-restore"); err != nil {
			return fmt.Errorf("restore: %w", err)
		}
	}
	in, err := os.ReadFile(backupPath)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(statePath), 0o700); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := atomicfile.WriteFile(statePath, in, 0o600); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}

func checkBackup(path string) error {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("backup %s is not a readable state file: %w", path, err)
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error {
		meta := tx.Bucket([]byte(metaBucketName))
		if meta == nil {
			return fmt.Errorf("%w: backup %s has no schema version; not a gpud state file", ErrInvalid, path)
		}
		v, err := strconv.Atoi(string(meta.Get([]byte(schemaKeyName))))
		if err != nil || v < 1 || v > SchemaVersion {
			return fmt.Errorf("%w: backup %s has schema %q; this gpud reads 1..%d", ErrInvalid, path, meta.Get([]byte(schemaKeyName)), SchemaVersion)
		}
		return nil
	})
}
