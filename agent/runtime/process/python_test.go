package process

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A job's python: "3.X" uses the first python3.X on PATH that the job's
// user can run: one behind a directory it cannot enter (like a pyenv
// shim under root's 0700 home) is passed over, and one it can run is put
// first on its PATH as python and python3 wrappers, which keep the
// interpreter's own name (pyenv's shims look at it).
func TestPythonIsTheFirstInterpreterTheJobsUserCanRun(t *testing.T) {
	if os.Geteuid() == 65534 {
		t.Skip("the test's files must belong to another user than the job's")
	}
	// t.TempDir's parent is 0700: make a root others may enter.
	root, err := os.MkdirTemp("", "gpud-python-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	closed, open := filepath.Join(root, "home", "bin"), filepath.Join(root, "usr", "bin")
	for _, d := range []string{closed, open} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "python3.99"), []byte("#!/bin/sh\necho 3.99 from "+d+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Dir(closed), 0o700); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(root); d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s is not traversable by others here (%v)", d, err)
		}
	}
	nobody := &credential{uid: 65534, gid: 65534, name: "nobody"}
	pathEnv := closed + string(filepath.ListSeparator) + open
	got, err := findPython(pathEnv, "3.99", nobody)
	if err != nil || got != filepath.Join(open, "python3.99") {
		t.Fatalf("findPython = %q, %v; want the one in %s", got, err, open)
	}
	if _, err := findPython(closed, "3.99", nobody); err == nil || !strings.Contains(err.Error(), "cannot run") {
		t.Fatalf("only behind a closed directory: %v, want an error saying the job's user cannot run it", err)
	}
	if _, err := findPython(open, "3.98", nobody); err == nil || !strings.Contains(err.Error(), "no python3.98") {
		t.Fatalf("a version the host lacks: %v", err)
	}
	work := t.TempDir()
	env, err := usePython([]string{"A=1", "PATH=" + pathEnv}, work, "3.99", nil)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, pythonBin)
	if !slices.Contains(env, "PATH="+bin+string(filepath.ListSeparator)+pathEnv) {
		t.Fatalf("env %q: the wrappers are not first on PATH", env)
	}
	for _, name := range []string{"python", "python3"} {
		b, err := os.ReadFile(filepath.Join(bin, name))
		if err != nil || !strings.Contains(string(b), "exec '"+filepath.Join(closed, "python3.99")+"' \"$@\"") {
			t.Fatalf("%s: %q %v, want an exec of the agent's own first python3.99", name, b, err)
		}
	}
}
