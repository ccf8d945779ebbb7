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
	for _, dest := range []string{"../x", "a/../../x", "/", "//", "/a/../../x", "/a//b", "/a/./b", "~/../x", "~root/x", "~//x", ".gpud-root/etc", ".gpud-home"} {
		if _, err := Pack(&bytes.Buffer{}, []Source{{Local: dir, Dest: dest}}, Options{}); err == nil {
			t.Errorf("dest %s: packed, want a refusal", dest)
		}
	}
}

// TestPackCarriesAbsoluteAndHomeTargetsUnderReservedNames: a target at an
// absolute path or under ~ travels as a relative name under RootDir or
// HomeDir (which untar's rules accept), and Anchored reads it back.
func TestPackCarriesAbsoluteAndHomeTargetsUnderReservedNames(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{"id_rsa": "key", "repo/main.py": "print(1)\n"})
	var buf bytes.Buffer
	_, err := Pack(&buf, []Source{
		{Local: filepath.Join(dir, "id_rsa"), Dest: "/root/.ssh/id_rsa"},
		{Local: filepath.Join(dir, "repo"), Dest: "/my-repo/"},
		{Local: filepath.Join(dir, "id_rsa"), Dest: "~/.ssh/key"},
		{Local: filepath.Join(dir, "repo"), Dest: "~"},
		{Local: filepath.Join(dir, "id_rsa"), Dest: "conf/key"},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := untar.Check(bytes.NewReader(buf.Bytes()), untar.DefaultLimits); err != nil {
		t.Fatalf("untar refuses the archive: %v", err)
	}
	out := t.TempDir()
	if err := untar.Extract(bytes.NewReader(buf.Bytes()), out, untar.DefaultLimits, nil); err != nil {
		t.Fatal(err)
	}
	got := listTree(t, out)
	want := []string{".gpud-home/.ssh/key", ".gpud-home/main.py", ".gpud-root/my-repo/main.py", ".gpud-root/root/.ssh/id_rsa", "conf/key"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("entries %v, want %v", got, want)
	}
	for name, want := range map[string]struct {
		a    Anchor
		rest string
	}{
		".gpud-root/root/.ssh/id_rsa": {AtRoot, "root/.ssh/id_rsa"},
		".gpud-home/.ssh/key":         {AtHome, ".ssh/key"},
		".gpud-home":                  {AtHome, "."},
		"conf/key":                    {InWorkDir, "conf/key"},
		".gpud-rootish/x":             {InWorkDir, ".gpud-rootish/x"},
	} {
		if a, rest := Anchored(name); a != want.a || rest != want.rest {
			t.Errorf("Anchored(%q) = %v %q, want %v %q", name, a, rest, want.a, want.rest)
		}
	}
	// A tree with a top-level directory of a reserved name is refused, not
	// mistaken for a target outside the working directory.
	testutil.WriteFiles(t, filepath.Join(dir, "sneaky"), map[string]string{".gpud-root/etc/passwd": "x"})
	if _, err := Pack(&bytes.Buffer{}, []Source{{Local: filepath.Join(dir, "sneaky"), Dest: "."}}, Options{}); err == nil || !strings.Contains(err.Error(), "reserve") {
		t.Errorf("a tree with a top-level .gpud-root: %v, want a refusal", err)
	}
	if _, err := Pack(&bytes.Buffer{}, []Source{{Local: filepath.Join(dir, "sneaky"), Dest: "sub"}}, Options{}); err != nil {
		t.Errorf("the same tree under a path: %v, want it packed", err)
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
