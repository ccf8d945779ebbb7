package upload

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/internal/untar"
)

func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestPackHonoursIgnoreFilesAndLaysOutDestinations(t *testing.T) {
	repo, other := t.TempDir(), t.TempDir()
	testutil.WriteFiles(t, repo, map[string]string{
		".gitignore":           "*.log\n/build/\n!keep.log\nsecret*\n",
		".gpudignore":          "data/**/*.bin\n",
		".dstackignore":        "notes.md\n",
		"main.py":              "print('hi')\n",
		"debug.log":            "x",
		"keep.log":             "kept",
		"build/out.o":          "o",
		"src/build/ok.txt":     "not anchored: kept",
		"src/secret.key":       "k",
		"src/.gitignore":       "local.txt\n",
		"src/local.txt":        "ignored below src",
		"local.txt":            "kept at the root",
		"data/a/b/weights.bin": "w",
		"data/a/readme":        "r",
		"notes.md":             "n",
		".git/config":          "[core]",
	})
	testutil.WriteFiles(t, other, map[string]string{"config.json": "{}"})
	var buf bytes.Buffer
	a, err := Pack(&buf, []Source{{Local: repo, Dest: "."}, {Local: filepath.Join(other, "config.json"), Dest: "conf/app.json"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != int64(buf.Len()) || len(a.SHA256) != 64 {
		t.Fatalf("archive %+v for %d bytes", a, buf.Len())
	}
	out := t.TempDir()
	if err := untar.Extract(bytes.NewReader(buf.Bytes()), out, untar.DefaultLimits, nil); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(listTree(t, out), " ")
	want := ".dstackignore .gitignore .gpudignore conf/app.json data/a/readme keep.log local.txt main.py src/.gitignore src/build/ok.txt"
	if got != want {
		t.Fatalf("packed\n  %s\nwant\n  %s", got, want)
	}
}

func TestPackRefusesPastTheLimitAndDestinationsOutside(t *testing.T) {
	dir := t.TempDir()
	big := make([]byte, 256<<10)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Pack(&bytes.Buffer{}, []Source{{Local: dir, Dest: "."}}, Options{MaxBytes: 64 << 10})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "64 KiB") {
		t.Fatalf("Pack: %v, want too large naming 64 KiB", err)
	}
	for _, dest := range []string{"/etc/x", "../x", "~/x"} {
		if _, err := Pack(&bytes.Buffer{}, []Source{{Local: dir, Dest: dest}}, Options{}); err == nil || !strings.Contains(err.Error(), "inside the job's working directory") {
			t.Errorf("dest %s: %v, want a refusal", dest, err)
		}
	}
}

func TestPackLeavesOutLinksPointingOutside(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{"a.txt": "a"})
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(dir, "in")); err != nil {
		t.Fatal(err)
	}
	var buf, warn bytes.Buffer
	if _, err := Pack(&buf, []Source{{Local: dir, Dest: "."}}, Options{Warn: &warn}); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := untar.Extract(bytes.NewReader(buf.Bytes()), out, untar.DefaultLimits, nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(listTree(t, out), " "); got != "a.txt in" {
		t.Errorf("packed %s, want a.txt in", got)
	}
	if !strings.Contains(warn.String(), "left out") {
		t.Errorf("no warning for the link out: %q", warn.String())
	}
}
