package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"gpud.dev/gpud/internal/untar"
)

// MaxUploadBytes bounds an upload archive the agent keeps; the server's own
// limit (100 MiB by default) is far below it.
const MaxUploadBytes = 4 << 30

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// UploadDir is where an agent with data dir dataDir keeps upload archives,
// one file <sha256>.tar.gz each; the runtimes unpack from there.
func UploadDir(dataDir string) string { return filepath.Join(dataDir, "uploads") }

// HasUpload reports whether the archive sum is on this host.
func (a *Agent) HasUpload(sum string) bool {
	if !sha256Hex.MatchString(sum) {
		return false
	}
	fi, err := os.Stat(filepath.Join(UploadDir(a.cfg.DataDir), sum+".tar.gz"))
	return err == nil && fi.Mode().IsRegular()
}

// StoreUpload keeps the archive read from r under its SHA-256 sum, after
// checking the digest and its entries (untar.Check); otherwise nothing is
// kept and the error wraps ErrInvalid.
func (a *Agent) StoreUpload(sum string, r io.Reader) error {
	if !sha256Hex.MatchString(sum) {
		return fmt.Errorf("%w: upload %q: not a SHA-256 in hex", ErrInvalid, sum)
	}
	dir := UploadDir(a.cfg.DataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".incoming-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), r); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Errorf("%w: upload's SHA-256 is %s, not %s", ErrInvalid, got, sum)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := untar.Check(tmp, untar.DefaultLimits); err != nil {
		if errors.Is(err, untar.ErrRefused) {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, sum+".tar.gz"))
}
