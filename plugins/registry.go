package plugins

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Builtins maps each built-in backend type to its factory. The table is
// assembled where the backends are linked (cli), since plugins cannot
// import the packages that implement them; the server only needs its
// names, to start `gpud plugin serve TYPE`.
type Builtins map[string]Factory

// Names lists the built-in types, sorted.
func (b Builtins) Names() []string {
	out := make([]string, 0, len(b))
	for name := range b {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Serve serves the built-in backend of type name over go-plugin (the body
// of `gpud plugin serve NAME`); its configuration comes from the server
// over the plugin's connection, never from argv or the environment.
func (b Builtins) Serve(name string) error {
	f, ok := b[name]
	if !ok {
		return fmt.Errorf("no built-in backend %q (built in: %s)", name, strings.Join(b.Names(), ", "))
	}
	return Serve(ServeConfig{Type: name, New: f})
}

// ExternalPrefix starts the name of every external plugin executable:
// gpud-backend-<type> in the plugin directory serves backend type <type>.
const ExternalPrefix = "gpud-backend-"

// External is one executable found in the plugin directory.
type External struct {
	Type string `json:"type"`
	Path string `json:"path"`
	// Refused says why the server will not run it (permissions); nil
	// for a plugin it runs.
	Refused error `json:"-"`
}

// Discover lists the external plugins in dir, sorted by type; a missing
// dir has none. A plugin (or the directory) that anyone but its owner can
// write, or that is owned by neither root nor this process's user, is
// listed with Refused set: running it would let that other user run code
// as the server, with the backend's credentials.
func Discover(dir string) ([]External, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plugin dir: %w", err)
	}
	dirErr := CheckTrusted(dir)
	var out []External
	for _, e := range entries {
		name := e.Name()
		typ, ok := strings.CutPrefix(name, ExternalPrefix)
		if !ok || typ == "" || strings.HasSuffix(name, "~") {
			continue
		}
		p := filepath.Join(dir, name)
		ext := External{Type: typ, Path: p, Refused: dirErr}
		if ext.Refused == nil {
			ext.Refused = CheckTrusted(p)
		}
		if ext.Refused == nil {
			if fi, err := os.Stat(p); err != nil {
				ext.Refused = err
			} else if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
				ext.Refused = fmt.Errorf("%s is not an executable file", p)
			}
		}
		out = append(out, ext)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// CheckTrusted refuses a path (after symlinks) that a user other than its
// owner may write, or whose owner is neither root nor this process's user.
func CheckTrusted(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by group or others (mode %v): refused; chmod go-w it", real, fi.Mode().Perm())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot read its owner: refused", real)
	}
	if uid := uint32(os.Geteuid()); st.Uid != 0 && st.Uid != uid {
		return fmt.Errorf("%s is owned by uid %d, neither root nor this server's user (uid %d): refused", real, st.Uid, uid)
	}
	return nil
}
