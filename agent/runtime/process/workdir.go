package process

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// credential is the uid and gid a job runs as, and the name it was given
// by (for messages).
type credential struct {
	uid, gid uint32
	name     string
}

// lookupCredential resolves "uid", "uid:gid", "name" or "name:group".
func lookupCredential(s string) (credential, error) {
	name, group, _ := strings.Cut(s, ":")
	var uid, gid uint64
	var err error
	c := credential{name: name}
	if uid, err = strconv.ParseUint(name, 10, 32); err != nil {
		u, lerr := user.Lookup(name)
		if lerr != nil {
			return credential{}, lerr
		}
		uid, _ = strconv.ParseUint(u.Uid, 10, 32)
		gid, _ = strconv.ParseUint(u.Gid, 10, 32)
	} else if u, lerr := user.LookupId(name); lerr == nil {
		gid, _ = strconv.ParseUint(u.Gid, 10, 32)
		c.name = u.Username
	} else {
		gid = uid
	}
	if group != "" {
		if gid, err = strconv.ParseUint(group, 10, 32); err != nil {
			g, lerr := user.LookupGroup(group)
			if lerr != nil {
				return credential{}, errors.Join(err, lerr)
			}
			gid, _ = strconv.ParseUint(g.Gid, 10, 32)
		}
	}
	c.uid, c.gid = uint32(uid), uint32(gid)
	return c, nil
}

// LookupUID returns the uid of a user given as "name", "uid", "uid:gid"
// or "name:group", as Config.RunAs takes it.
func LookupUID(user string) (uint32, error) {
	c, err := lookupCredential(user)
	return c.uid, err
}

// defaultWorkRoot is /var/tmp/gpud-work-<hash of the absolute data dir>
// (os.TempDir() where /var/tmp is missing): a sticky, world-traversable
// parent that survives reboots and is disk-backed, unlike the data dir,
// which a job's user must not be able to enter.
func defaultWorkRoot(dataDir string) (string, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", err
	}
	base := "/var/tmp"
	if fi, err := os.Stat(base); err != nil || !fi.IsDir() {
		base = os.TempDir()
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(base, "gpud-work-"+hex.EncodeToString(sum[:6])), nil
}

// makeWorkRoot makes root (mode 0711) or checks that an existing one is a
// real directory owned by this user and writable by no one else, and sets
// its mode to 0711: jobs reach their own directory through it, but cannot
// list it, and another user of a shared /var/tmp can neither own it nor
// plant a link there.
func makeWorkRoot(root string) error {
	if err := os.Mkdir(root, 0o711); err != nil && !os.IsExist(err) {
		return fmt.Errorf("work root: %w", err)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return fmt.Errorf("work root: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || st.Uid != uint32(os.Geteuid()) {
		return fmt.Errorf("work root %s: not a directory owned by uid %d; remove it or choose another work root", root, os.Geteuid())
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return fmt.Errorf("work root: %w", err)
	}
	return nil
}

// newWorkDir makes the job's fresh working directory under root: a random
// name (so a job cannot guess another's path), mode 0700, owned by c when
// the job runs as another user. The root is made (and checked) again, as a
// Close or a temporary-files cleaner may have removed it.
func newWorkDir(root, jobID string, c *credential) (string, error) {
	if err := makeWorkRoot(root); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(root, jobID+"-")
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	if c != nil && c.uid != uint32(os.Geteuid()) {
		if err := os.Chown(dir, int(c.uid), int(c.gid)); err != nil {
			os.Remove(dir)
			return "", fmt.Errorf("working directory: %w", err)
		}
	}
	return dir, nil
}

// removeWorkDir deletes a job's working directory, which must lie in root
// (a job.json from elsewhere names no other path). os.RemoveAll opens each
// level without following links, so files the job left, links included,
// go and nothing outside does.
func removeWorkDir(root, dir string) error {
	if dir == "" || filepath.Dir(filepath.Clean(dir)) != filepath.Clean(root) {
		return nil
	}
	return os.RemoveAll(dir)
}
