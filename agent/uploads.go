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
	"strings"
	"time"

	"gpud.dev/gpud/internal/untar"
)

// MaxUploadBytes bounds an upload archive the agent keeps; the server's own
// limit (100 MiB by default) is far below it.
const MaxUploadBytes = 4 << 30

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// UploadDir is where an agent with data dir dataDir keeps upload archives,
// one file <sha256>.tar.gz each; the runtimes unpack from there.
func UploadDir(dataDir string) string { return filepath.Join(dataDir, "uploads") }

// uploadKeep is how long the agent keeps an archive no one asked for:
// the server asks (HasUpload) right before each start that needs it.
const uploadKeep = time.Hour

// HasUpload reports whether the archive sum is on this host, and marks it
// used (the sweep keeps it uploadKeep from now).
func (a *Agent) HasUpload(sum string) bool {
	if !sha256Hex.MatchString(sum) {
		return false
	}
	p := filepath.Join(UploadDir(a.cfg.DataDir), sum+".tar.gz")
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	now := time.Now()
	if err := os.Chtimes(p, now, now); err != nil {
		a.log.Warn().Err(err).Str("sha256", sum).Msg("mark upload used")
	}
	return true
}

// sweepUploads removes archives nobody asked for in the last uploadKeep:
// jobs unpack theirs at start, and the server pushes one again when a
// later job needs it.
func (a *Agent) sweepUploads() {
	dir := UploadDir(a.cfg.DataDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".tar.gz") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > uploadKeep {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				a.log.Warn().Err(err).Str("upload", e.Name()).Msg("sweep uploads")
			}
		}
	}
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
	if err := os.Rename(tmp.Name(), filepath.Join(dir, sum+".tar.gz")); err != nil {
		return err
	}
	a.sweepUploads()
	return nil
}
