package process

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
)

// pythonName matches an interpreter of one Python version: python3.11.
var pythonName = regexp.MustCompile(`^python(3\.[0-9]+)$`)

// pythonBin is where, inside a job's working directory, the wrappers that
// make `python` and `python3` the job's Python version live.
const pythonBin = ".gpud/bin"

// Pythons lists the Python versions ("3.11") whose python3.X interpreter
// is on the agent's PATH and executable by the user jobs run as: what a
// job's `python: "3.X"` can use on this host (api.HostInfo.Pythons).
func (r *Runtime) Pythons() []string {
	var out []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue // a PATH entry that does not exist or cannot be read offers nothing
		}
		for _, e := range entries {
			m := pythonName.FindStringSubmatch(e.Name())
			if m == nil || slices.Contains(out, m[1]) {
				continue
			}
			if executableBy(filepath.Join(dir, e.Name()), r.runAs) == nil {
				out = append(out, m[1])
			}
		}
	}
	slices.Sort(out)
	return out
}

// findPython is the first python3.X (version v) on pathEnv that c (nil:
// the agent's user) can execute.
func findPython(pathEnv, v string, c *credential) (string, error) {
	var last error
	for _, dir := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(dir) {
			continue // a relative PATH entry would depend on the job's directory
		}
		p := filepath.Join(dir, "python"+v)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if last = executableBy(p, c); last == nil {
			return p, nil
		}
	}
	if last != nil {
		return "", fmt.Errorf("python %s: found on this host's PATH, but the job's user cannot run it: %w", v, last)
	}
	return "", fmt.Errorf("python %s: this host has no python%s on its PATH", v, v)
}

// executableBy reports whether c (nil: the agent's user) may run path:
// every directory on the way to it, links resolved, must let c through,
// and the file must be executable and readable (scripts are read by their
// interpreter) by c.
func executableBy(path string, c *credential) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", real)
	}
	if c == nil {
		if syscall.Access(real, 0x1|0x4) != nil { // X_OK|R_OK
			return fmt.Errorf("%s is not executable by this agent", real)
		}
		return nil
	}
	if !permits(fi, c, 0o5) {
		return fmt.Errorf("%s is not executable by uid %d", real, c.uid)
	}
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		di, err := os.Stat(d)
		if err != nil {
			return err
		}
		if !permits(di, c, 0o1) {
			return fmt.Errorf("uid %d cannot enter %s", c.uid, d)
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// permits reports whether fi's permission bits give c every bit of want
// (rwx as 0o7), as the kernel decides for a user that is not root.
func permits(fi os.FileInfo, c *credential, want os.FileMode) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	perm := fi.Mode().Perm()
	switch {
	case c.uid == 0:
		return fi.IsDir() || perm&0o111 != 0
	case st.Uid == c.uid:
		perm >>= 6
	case st.Gid == c.gid:
		perm >>= 3
	}
	return perm&want == want
}

// usePython makes `python` and `python3` run the interpreter of version v
// for the job: small wrappers in workDir/.gpud/bin, put first on the PATH
// of env (the job's environment as "K=V"). Wrappers, not links, so an
// interpreter that looks at its own name (pyenv's shims) still runs
// version v.
func usePython(env []string, workDir, v string, c *credential) ([]string, error) {
	i := slices.IndexFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") })
	pathEnv := ""
	if i >= 0 {
		pathEnv = strings.TrimPrefix(env[i], "PATH=")
	}
	interp, err := findPython(pathEnv, v, c)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(workDir, pythonBin)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, fmt.Errorf("python %s: %w", v, err)
	}
	script := "#!/bin/sh\nexec '" + strings.ReplaceAll(interp, "'", `'\''`) + "' \"$@\"\n"
	for _, name := range []string{"python", "python3"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			return nil, fmt.Errorf("python %s: %w", v, err)
		}
	}
	if c != nil {
		// The job's user owns its working directory and all in it, as
		// with a working_dir made there (chownTree).
		for _, p := range []string{".gpud", pythonBin, pythonBin + "/python", pythonBin + "/python3"} {
			if err := os.Lchown(filepath.Join(workDir, p), int(c.uid), int(c.gid)); err != nil {
				return nil, fmt.Errorf("python %s: %w", v, err)
			}
		}
	}
	out := slices.Clone(env)
	if i < 0 {
		return append(out, "PATH="+bin), nil
	}
	out[i] = "PATH=" + bin + string(filepath.ListSeparator) + pathEnv
	return out, nil
}

// errNotProcess is the start error for a field a process cannot honour.
func errNotProcess(jobID, field, instead string) error {
	return errors.New("job " + jobID + ": " + field + " cannot be honoured by the process runtime; " + instead)
}
