package untar

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// item is one entry of a test archive.
type item struct {
	name, body, link string
	typ              byte
}

func archive(t testing.TB, items ...item) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, it := range items {
		h := &tar.Header{Name: it.name, Mode: 0o644, Typeflag: it.typ, Linkname: it.link}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(it.body))
		}
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(it.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestExtractWritesFilesDirectoriesAndInsideLinks(t *testing.T) {
	root := t.TempDir()
	data := archive(t,
		item{name: "src/", typ: tar.TypeDir},
		item{name: "src/main.py", body: "print(1)\n"},
		item{name: "deep/a/b/c.txt", body: "c"},
		item{name: "latest", typ: tar.TypeSymlink, link: "src/main.py"},
	)
	if err := Check(bytes.NewReader(data), DefaultLimits); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if err := Extract(bytes.NewReader(data), root, DefaultLimits, nil); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	for name, want := range map[string]string{"src/main.py": "print(1)\n", "deep/a/b/c.txt": "c", "latest": "print(1)\n"} {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
}

func TestArchivesThatEscapeOrOverflowAreRefused(t *testing.T) {
	tests := []struct {
		name  string
		items []item
		lim   Limits
		want  string
	}{
		{"dot-dot entry", []item{{name: "../evil", body: "x"}}, DefaultLimits, `".." is not allowed`},
		{"dot-dot inside", []item{{name: "a/../../evil", body: "x"}}, DefaultLimits, `".." is not allowed`},
		{"absolute entry", []item{{name: "/etc/passwd", body: "x"}}, DefaultLimits, "absolute paths"},
		{"root entry", []item{{name: "./", typ: tar.TypeDir}}, DefaultLimits, "addresses the root"},
		{"absolute link", []item{{name: "l", typ: tar.TypeSymlink, link: "/etc"}}, DefaultLimits, "only relative links"},
		{"link out", []item{{name: "a/l", typ: tar.TypeSymlink, link: "../../x"}}, DefaultLimits, "points outside"},
		{"write through link", []item{{name: "l", typ: tar.TypeSymlink, link: "d"}, {name: "l/f", body: "x"}}, DefaultLimits, "under the symbolic link"},
		{"link climbing out of another link", []item{{name: "d/e/l", typ: tar.TypeSymlink, link: ".."}, {name: "d/m", typ: tar.TypeSymlink, link: "e/l/../.."}}, DefaultLimits, "allowed only at the start"},
		{"hard link", []item{{name: "h", typ: tar.TypeLink, link: "x"}}, DefaultLimits, "only regular files"},
		{"device", []item{{name: "d", typ: tar.TypeChar}}, DefaultLimits, "only regular files"},
		{"too many files", []item{{name: "a"}, {name: "b"}, {name: "c"}}, Limits{MaxFiles: 2}, "more than 2 entries"},
		{"too many bytes", []item{{name: "a", body: "12345"}, {name: "b", body: "6789"}}, Limits{MaxBytes: 8}, "more than 8 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := archive(t, tc.items...)
			err := Check(bytes.NewReader(data), tc.lim)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check: %v, want a refusal saying %q", err, tc.want)
			}
			parent := t.TempDir()
			root := filepath.Join(parent, "root")
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			err = Extract(bytes.NewReader(data), root, tc.lim, nil)
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("Extract: %v, want a refusal", err)
			}
			left, _ := os.ReadDir(parent)
			if len(left) != 1 {
				t.Errorf("something was written beside the root: %v", left)
			}
		})
	}
}

func TestNotAGzipIsRefused(t *testing.T) {
	if err := Check(strings.NewReader("plain text"), DefaultLimits); !errors.Is(err, ErrRefused) {
		t.Fatalf("Check: %v, want a refusal", err)
	}
}

// FuzzExtractNeverWritesOutsideTheRoot feeds arbitrary archives: whatever
// Extract accepts or refuses, nothing appears beside the root, and every
// link it made resolves inside the root.
func FuzzExtractNeverWritesOutsideTheRoot(f *testing.F) {
	f.Add(archive(f, item{name: "a/b", body: "x"}, item{name: "l", typ: tar.TypeSymlink, link: "a/b"}))
	f.Add(archive(f, item{name: "../x", body: "x"}))
	f.Add(archive(f, item{name: "l", typ: tar.TypeSymlink, link: ".."}, item{name: "l/x", body: "x"}))
	f.Add(archive(f, item{name: "a/l", typ: tar.TypeSymlink, link: "../.."}))
	f.Add(archive(f, item{name: "d/e/l", typ: tar.TypeSymlink, link: ".."}, item{name: "d/m", typ: tar.TypeSymlink, link: "e/l/../.."}))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		root := filepath.Join(parent, "root")
		if err := os.Mkdir(root, 0o700); err != nil {
			t.Fatal(err)
		}
		_ = Extract(bytes.NewReader(data), root, Limits{MaxFiles: 64, MaxBytes: 1 << 20}, nil)
		left, err := os.ReadDir(parent)
		if err != nil || len(left) != 1 {
			t.Fatalf("beside the root: %v %v", left, err)
		}
		err = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.Mode()&os.ModeSymlink == 0 {
				return err
			}
			target, err := filepath.EvalSymlinks(p)
			if err != nil {
				return nil // dangling inside is harmless
			}
			rel, err := filepath.Rel(root, target)
			if err != nil || !filepath.IsLocal(rel) {
				t.Fatalf("link %s resolves to %s, outside the root", p, target)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
