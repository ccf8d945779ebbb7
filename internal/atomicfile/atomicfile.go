// Package atomicfile is gpud's one way to replace a file so that a reader
// or a crash never sees it half written: write a temporary file in the
// same directory, fsync it, rename it over the target, fsync the
// directory. It imports nothing of gpud, so every package may use it.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, created with perm. When it returns
// nil the new content is durable; on error path is unchanged and no
// temporary file is left behind.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write is WriteFile for content produced by write (a backup stream, an
// encoder). The file is replaced only when write returns nil.
func Write(path string, perm os.FileMode, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close() // already failing: the first error is the one to report
			_ = os.Remove(tmp)
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := write(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable. Filesystems that cannot fsync a
// directory (EINVAL) are accepted: the rename is as durable as they allow.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	if serr != nil && errors.Is(serr, os.ErrInvalid) {
		serr = nil
	}
	return errors.Join(serr, d.Close())
}
