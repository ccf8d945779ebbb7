// Package upload packs what a run's `repos` and `files` name on the
// client into one gzip-compressed tar, laid out as the job's working
// directory will see it (targets outside it under reserved names, see
// targets.go), honouring .gitignore, .dstackignore and
// .gpudignore (IgnoreFiles) and a size limit checked while packing, so an
// oversized tree is refused before a byte is sent.
//
// upload imports api (the run spec, the client) and internal/untar (the
// link rule an unpacker applies), never daemon or agent.
package upload

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"gpud.dev/gpud/internal/untar"
)

// DefaultMaxBytes is the packed size a server accepts unless its admin
// says otherwise (gpud serve --max-upload-size).
const DefaultMaxBytes = 100 << 20

// ErrTooLarge is returned when the packed archive passes Options.MaxBytes.
var ErrTooLarge = errors.New("the upload is too large")

// Source is one local file or directory and where it lands: relative to
// the job's working directory ("." for the working directory itself), or
// at an absolute or ~/ path of the container (targets.go).
type Source struct {
	Local string
	Dest  string
}

// Options tune Pack.
type Options struct {
	// MaxBytes bounds the packed (compressed) size; 0 means DefaultMaxBytes.
	MaxBytes int64
	// Warn receives one line per path left out for a reason other than an
	// ignore rule (a link pointing outside the tree, a socket); nil drops them.
	Warn io.Writer
	// Clone packs fresh clones as they are: .git included (the job keeps
	// the history, as on dstack) and no ignore file read (every file of a
	// fresh clone is tracked).
	Clone bool
	// Base names a tar.gz whose entries are packed first, as they are (an
	// upload the sources are added to).
	Base string
}

// Archive is a packed upload.
type Archive struct {
	// SHA256 is the hex digest of the packed bytes: the name the server
	// stores it under.
	SHA256 string
	Size   int64
	Files  int
}

// Pack writes the sources into w as a tar.gz. A directory is walked with
// the ignore files found in it and below it (.git is always left out); a
// file is packed as is, whatever ignore files say.
func Pack(w io.Writer, sources []Source, opt Options) (Archive, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	h := sha256.New()
	cw := &limitWriter{w: io.MultiWriter(w, h), max: opt.MaxBytes}
	zw := gzip.NewWriter(cw)
	p := &packer{tw: tar.NewWriter(zw), warn: opt.Warn, clone: opt.Clone}
	if opt.Base != "" {
		if err := p.copyBase(opt.Base); err != nil {
			return Archive{}, cw.explain(err)
		}
	}
	for _, src := range sources {
		dest, err := cleanDest(src.Dest)
		if err != nil {
			return Archive{}, err
		}
		fi, err := os.Stat(src.Local)
		if err != nil {
			return Archive{}, fmt.Errorf("pack %s: %w", src.Local, err)
		}
		if fi.IsDir() {
			err = p.walk(src.Local, dest, ".", nil)
		} else if a, rest := Anchored(dest); a != InWorkDir && rest == "." {
			return Archive{}, fmt.Errorf("pack %s: a file can not replace the home directory; give its path below ~, like ~/%s", src.Local, filepath.Base(src.Local))
		} else {
			err = p.add(src.Local, dest, fi)
		}
		if err != nil {
			return Archive{}, cw.explain(err)
		}
	}
	if err := p.tw.Close(); err != nil {
		return Archive{}, cw.explain(err)
	}
	if err := zw.Close(); err != nil {
		return Archive{}, cw.explain(err)
	}
	return Archive{SHA256: hex.EncodeToString(h.Sum(nil)), Size: cw.n, Files: p.files}, nil
}

type packer struct {
	tw    *tar.Writer
	warn  io.Writer
	files int
	clone bool
}

// copyBase packs the entries of the tar.gz at name as they are.
func (p *packer) copyBase(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("pack %s: %w", name, err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("pack %s: %w", name, err)
		}
		if err := p.header(h); err != nil {
			return err
		}
		if _, err := io.Copy(p.tw, tr); err != nil {
			return fmt.Errorf("pack %s: %w", name, err)
		}
	}
}

// walk packs the directory dir at dest; rel is its path relative to the
// walked root (for ignore rules), sets the rule sets above it.
func (p *packer) walk(dir, dest, rel string, sets []ruleSet) error {
	var rs ruleSet
	if !p.clone {
		var err error
		if rs, err = readRules(dir, rel); err != nil {
			return fmt.Errorf("pack %s: %w", dir, err)
		}
	}
	if len(rs.rules) > 0 {
		sets = append(sets[:len(sets):len(sets)], rs)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("pack %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		childRel := path.Join(rel, name)
		isDir := e.IsDir()
		if !p.clone && ((isDir && name == ".git") || ignored(sets, childRel, isDir)) {
			continue
		}
		local := filepath.Join(dir, name)
		childDest := path.Join(dest, name)
		if a, _ := Anchored(childDest); a != InWorkDir && dest == "." {
			return fmt.Errorf("pack %s: %s and %s are names gpud reserves at the top of an upload; rename it or give the repo a path", local, RootDir, HomeDir)
		}
		fi, err := e.Info()
		if err != nil {
			return fmt.Errorf("pack %s: %w", local, err)
		}
		if isDir {
			if err := p.header(&tar.Header{Typeflag: tar.TypeDir, Name: childDest + "/", Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()}); err != nil {
				return err
			}
			if err := p.walk(local, childDest, childRel, sets); err != nil {
				return err
			}
			continue
		}
		if err := p.add(local, childDest, fi); err != nil {
			return err
		}
	}
	return nil
}

// add packs one file or link; anything else is left out with a warning.
func (p *packer) add(local, dest string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(local)
		if err != nil {
			return fmt.Errorf("pack %s: %w", local, err)
		}
		if err := untar.CheckLink(dest, filepath.ToSlash(target)); err != nil {
			p.warnf("left out %s: a link to %s, outside what is uploaded", local, target)
			return nil
		}
		return p.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: dest, Linkname: filepath.ToSlash(target), Mode: 0o777, ModTime: fi.ModTime()})
	case !fi.Mode().IsRegular():
		p.warnf("left out %s: not a regular file, directory or link", local)
		return nil
	}
	f, err := os.Open(local)
	if err != nil {
		return fmt.Errorf("pack %s: %w", local, err)
	}
	defer f.Close()
	if err := p.header(&tar.Header{Typeflag: tar.TypeReg, Name: dest, Size: fi.Size(), Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()}); err != nil {
		return err
	}
	if _, err := io.CopyN(p.tw, f, fi.Size()); err != nil {
		return fmt.Errorf("pack %s: %w", local, err)
	}
	return nil
}

func (p *packer) header(h *tar.Header) error {
	p.files++
	if err := p.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("pack %s: %w", h.Name, err)
	}
	return nil
}

func (p *packer) warnf(format string, args ...any) {
	if p.warn != nil {
		fmt.Fprintf(p.warn, format+"\n", args...)
	}
}

// limitWriter counts what passes and fails past max.
type limitWriter struct {
	w   io.Writer
	n   int64
	max int64
}

func (l *limitWriter) Write(b []byte) (int, error) {
	if l.n+int64(len(b)) > l.max {
		return 0, ErrTooLarge
	}
	n, err := l.w.Write(b)
	l.n += int64(n)
	return n, err
}

// explain turns a write past the limit into an error the user can act on.
func (l *limitWriter) explain(err error) error {
	if errors.Is(err, ErrTooLarge) {
		return fmt.Errorf("%w: repos and files pack to more than %s (the upload limit); leave large or generated paths out with .gpudignore (gitignore syntax)", ErrTooLarge, FormatBytes(l.max))
	}
	return err
}

// FormatBytes writes n as "12.5 MiB", "300 KiB" or "512 B".
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
