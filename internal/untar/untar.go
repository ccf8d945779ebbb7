// Package untar unpacks a user's upload (a gzip-compressed tar of repos and
// files) into a job's own directory, and nowhere else. It is the one place
// that decides what an upload may contain:
//
//   - names are relative and stay inside the root: no absolute paths, no
//     "..", no empty or "." entries that would address the root itself;
//   - only regular files, directories and symbolic links; hard links,
//     devices, FIFOs and anything else are refused;
//   - a symbolic link must be relative and point inside the root; links
//     are made last, so no entry is ever written through one, and an entry
//     under a link's path is refused;
//   - the file count and the unpacked size are bounded (Limits).
//
// Every refusal is an error naming the entry; nothing is written for a
// refused archive when Check is used first (the server checks at upload,
// the agent checks again before it unpacks into a fresh directory).
//
// untar imports no gpud package.
package untar

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Limits bound what an archive may unpack to.
type Limits struct {
	// MaxFiles is the most entries (files, directories and links).
	MaxFiles int
	// MaxBytes is the most bytes of file content, in total.
	MaxBytes int64
}

// DefaultLimits are 100,000 entries and 4 GiB of content: far above a
// source tree, far below what fills a host's disk by accident.
var DefaultLimits = Limits{MaxFiles: 100_000, MaxBytes: 4 << 30}

// ErrRefused wraps every refusal of an archive's content (as opposed to a
// read or write error).
var ErrRefused = errors.New("upload refused")

// Owner, when set, is given every path Extract makes.
type Owner struct{ UID, GID int }

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// entry is one checked tar header.
type entry struct {
	name string // cleaned, slash-separated, relative
	hdr  *tar.Header
}

// walker reads an archive and checks each entry against the rules above.
type walker struct {
	tr    *tar.Reader
	lim   Limits
	files int
	bytes int64
	links map[string]bool // names of the links seen so far
}

func newWalker(r io.Reader, lim Limits) (*walker, func() error, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, nil, refuse("not a gzip-compressed tar: %v", err)
	}
	return &walker{tr: tar.NewReader(zr), lim: lim, links: map[string]bool{}}, zr.Close, nil
}

// next returns the next checked entry, or io.EOF.
func (w *walker) next() (entry, error) {
	hdr, err := w.tr.Next()
	if err == io.EOF {
		return entry{}, io.EOF
	}
	if err != nil {
		return entry{}, refuse("not a valid tar: %v", err)
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return entry{}, err
	}
	w.files++
	if w.lim.MaxFiles > 0 && w.files > w.lim.MaxFiles {
		return entry{}, refuse("more than %d entries", w.lim.MaxFiles)
	}
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		if w.links[p] {
			return entry{}, refuse("entry %q lies under the symbolic link %q", hdr.Name, p)
		}
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir:
	case tar.TypeSymlink:
		if err := CheckLink(name, hdr.Linkname); err != nil {
			return entry{}, err
		}
		w.links[name] = true
	default:
		return entry{}, refuse("entry %q: only regular files, directories and symbolic links are allowed (type %q)", hdr.Name, hdr.Typeflag)
	}
	if hdr.Typeflag == tar.TypeReg {
		if hdr.Size < 0 {
			return entry{}, refuse("entry %q: negative size", hdr.Name)
		}
		w.bytes += hdr.Size
		if w.lim.MaxBytes > 0 && w.bytes > w.lim.MaxBytes {
			return entry{}, refuse("more than %d bytes of content", w.lim.MaxBytes)
		}
	}
	return entry{name: name, hdr: hdr}, nil
}

// cleanName refuses absolute names, ".." anywhere, and names that address
// the root; it returns the cleaned relative name.
func cleanName(name string) (string, error) {
	n := strings.TrimSuffix(name, "/")
	switch {
	case n == "" || n == ".":
		return "", refuse("entry %q addresses the root", name)
	case strings.HasPrefix(n, "/") || strings.Contains(n, "\\") || strings.ContainsRune(n, 0):
		return "", refuse("entry %q: absolute paths, backslashes and NUL are not allowed", name)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", refuse("entry %q: \"..\" is not allowed", name)
		}
	}
	c := path.Clean(n)
	if c == "." || !filepath.IsLocal(filepath.FromSlash(c)) {
		return "", refuse("entry %q does not stay inside the upload", name)
	}
	return c, nil
}

// CheckLink allows a relative link at name (slash-separated, relative)
// whose target, from the link's directory, stays inside the root; a packer
// uses it to leave out links an unpacker would refuse.
func CheckLink(name, target string) error {
	if target == "" || strings.HasPrefix(target, "/") || strings.ContainsRune(target, 0) {
		return refuse("symbolic link %q -> %q: only relative links inside the upload are allowed", name, target)
	}
	// ".." only as a leading run: it climbs real directories (a link's
	// parents are never links), so the lexical check below is the
	// kernel's answer too. A ".." after a component could climb out of
	// whatever that component links to.
	parts := strings.Split(target, "/")
	i := 0
	for i < len(parts) && parts[i] == ".." {
		i++
	}
	for _, p := range parts[i:] {
		if p == ".." {
			return refuse("symbolic link %q -> %q: \"..\" is allowed only at the start of a link's target", name, target)
		}
	}
	joined := path.Join(path.Dir(name), target)
	if joined == "." || !filepath.IsLocal(filepath.FromSlash(joined)) {
		return refuse("symbolic link %q -> %q points outside the upload", name, target)
	}
	return nil
}

// Check reads the whole archive and returns the first refusal, without
// writing anything.
func Check(r io.Reader, lim Limits) error {
	w, closeZ, err := newWalker(r, lim)
	if err != nil {
		return err
	}
	defer closeZ()
	for {
		_, err := w.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Extract unpacks the archive into root, which must exist. It refuses the
// archive at the first entry that breaks a rule (what was written before
// stays; callers extract into a fresh directory they remove on error).
// Files keep their permission bits (at most 0777, without setuid, setgid
// or sticky); owner, when not nil, is given every path made.
func Extract(r io.Reader, root string, lim Limits, owner *Owner) error {
	w, closeZ, err := newWalker(r, lim)
	if err != nil {
		return err
	}
	defer closeZ()
	root, err = filepath.Abs(root)
	if err != nil {
		return err
	}
	var links []entry
	for {
		e, err := w.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if e.hdr.Typeflag == tar.TypeSymlink {
			links = append(links, e) // made last: nothing is written through a link
			continue
		}
		if err := write(root, e, w.tr, owner); err != nil {
			return err
		}
	}
	for _, e := range links {
		dst := filepath.Join(root, filepath.FromSlash(e.name))
		if err := mkParents(root, e.name, owner); err != nil {
			return err
		}
		if err := os.Symlink(e.hdr.Linkname, dst); err != nil {
			return fmt.Errorf("unpack %s: %w", e.name, err)
		}
		if err := chown(dst, owner); err != nil {
			return err
		}
	}
	return nil
}

// write makes one directory or regular file. Parents are made (and checked
// to be real directories, never links) on the way.
func write(root string, e entry, src io.Reader, owner *Owner) error {
	dst := filepath.Join(root, filepath.FromSlash(e.name))
	if err := mkParents(root, e.name, owner); err != nil {
		return err
	}
	mode := os.FileMode(e.hdr.Mode) & 0o777
	if e.hdr.Typeflag == tar.TypeDir {
		if err := os.Mkdir(dst, mode|0o700); err != nil && !os.IsExist(err) {
			return fmt.Errorf("unpack %s: %w", e.name, err)
		}
		if fi, err := os.Lstat(dst); err != nil || !fi.IsDir() {
			return refuse("entry %q: a directory where a file was", e.name)
		}
		return chown(dst, owner)
	}
	if fi, err := os.Lstat(dst); err == nil && !fi.Mode().IsRegular() {
		return refuse("entry %q: a file where a directory was", e.name)
	}
	// O_NOFOLLOW: dst is never a link here (links come last), and this
	// says so to the kernel too.
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|noFollow, mode|0o600)
	if err != nil {
		return fmt.Errorf("unpack %s: %w", e.name, err)
	}
	_, err = io.CopyN(f, src, e.hdr.Size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unpack %s: %w", e.name, err)
	}
	return chown(dst, owner)
}

// mkParents makes the directories above name inside root; an existing
// component that is not a directory (a file or a link) is refused.
func mkParents(root, name string, owner *Owner) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	p := root
	for _, part := range strings.Split(dir, "/") {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		switch {
		case err == nil && fi.IsDir():
			continue
		case err == nil:
			return refuse("entry %q: %q is not a directory", name, part)
		case !os.IsNotExist(err):
			return fmt.Errorf("unpack %s: %w", name, err)
		}
		if err := os.Mkdir(p, 0o755); err != nil {
			return fmt.Errorf("unpack %s: %w", name, err)
		}
		if err := chown(p, owner); err != nil {
			return err
		}
	}
	return nil
}

func chown(p string, owner *Owner) error {
	if owner == nil {
		return nil
	}
	if err := os.Lchown(p, owner.UID, owner.GID); err != nil {
		return fmt.Errorf("unpack: %w", err)
	}
	return nil
}
