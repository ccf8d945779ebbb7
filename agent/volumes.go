package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// This file holds instance volumes on the host side: which host paths a
// job may mount is its host admin's choice (the prefixes), never the
// agent's or server's data dirs, and the agent checks it again at every
// start, after resolving symlinks, whatever the server let through.

// VolumePolicy is what host paths jobs may mount as instance volumes.
// The zero value allows none.
type VolumePolicy struct {
	// Prefixes are the directories (cleaned, absolute) under which jobs
	// may mount; "/" allows any path but Denied.
	Prefixes []string
	// Denied are paths no volume may be, lie in or contain: the data dirs.
	Denied []string
	// realPrefixes and realDenied are the above with symlinks resolved,
	// so a path is judged where it really leads.
	realPrefixes, realDenied []string
}

// ErrVolumeForbidden marks a host path no host would mount (the root, a
// data dir, a `..` escape): a job asking for it fails even when the volume
// is optional.
var ErrVolumeForbidden = errors.New("no host mounts this path")

// NewVolumePolicy checks the admin's prefixes (absolute paths, no `..`)
// and resolves the symlinks of prefixes and denied paths that exist.
func NewVolumePolicy(prefixes, denied []string) (VolumePolicy, error) {
	var p VolumePolicy
	for _, pre := range prefixes {
		if pre == "" {
			continue
		}
		if !filepath.IsAbs(pre) || hasDotDot(pre) {
			return VolumePolicy{}, fmt.Errorf("volume prefix %q: write an absolute path without `..`, like /data", pre)
		}
		c := filepath.Clean(pre)
		if !slices.Contains(p.Prefixes, c) {
			p.Prefixes = append(p.Prefixes, c)
			p.realPrefixes = append(p.realPrefixes, realPath(c))
		}
	}
	for _, d := range denied {
		if d == "" {
			continue
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			return VolumePolicy{}, fmt.Errorf("denied volume path %q: %w", d, err)
		}
		if !slices.Contains(p.Denied, abs) {
			p.Denied = append(p.Denied, abs)
			p.realDenied = append(p.realDenied, realPath(abs))
		}
	}
	return p, nil
}

// realPath is p with its symlinks resolved, or p where it does not exist.
func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// hasDotDot reports whether a path has a `..` element, cleaned or not.
func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(filepath.ToSlash(p), "/"), "..")
}

// within reports whether p is dir or lies inside it (both clean, absolute).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// CheckVolumePath is the check the server's plan and placement and the
// agent share: hostPath must be absolute without `..`, not the root nor
// a denied path (nor inside or above one), and under one of prefixes. An
// error wrapping ErrVolumeForbidden is refused on every host; another
// means only that these prefixes do not allow it.
func CheckVolumePath(hostPath string, prefixes, denied []string) error {
	switch {
	case !filepath.IsAbs(hostPath):
		return fmt.Errorf("%w: %q is not an absolute host path", ErrVolumeForbidden, hostPath)
	case hasDotDot(hostPath):
		return fmt.Errorf("%w: %q climbs out with `..`", ErrVolumeForbidden, hostPath)
	}
	c := filepath.Clean(hostPath)
	if c == "/" {
		return fmt.Errorf("%w: the host's root directory holds every data dir on it", ErrVolumeForbidden)
	}
	for _, d := range denied {
		if within(c, d) || within(d, c) {
			return fmt.Errorf("%w: %s is or holds a gpud data dir (%s)", ErrVolumeForbidden, c, d)
		}
	}
	if !slices.ContainsFunc(prefixes, func(pre string) bool { return within(c, pre) }) {
		if len(prefixes) == 0 {
			return fmt.Errorf("%s: this host's admin allows no instance volumes", c)
		}
		return fmt.Errorf("%s is not under a directory this host's admin allows for volumes (%s)", c, strings.Join(prefixes, ", "))
	}
	return nil
}

// check is CheckVolumePath with the policy's paths.
func (p VolumePolicy) check(hostPath string) error {
	return CheckVolumePath(hostPath, p.Prefixes, p.Denied)
}

// checkReal judges a resolved path against the resolved prefixes and
// denied paths (and the denied paths as written).
func (p VolumePolicy) checkReal(real string) error {
	return CheckVolumePath(real, p.realPrefixes, append(slices.Clone(p.Denied), p.realDenied...))
}

// Prepare checks every volume of spec and returns the spec to start: each
// host path resolved to where it really leads, a missing directory made
// (mode 0777, as dstack does, so any job user may write there), and an
// optional volume this host cannot mount left out (logged). A volume the
// host may not mount fails the job; one no host may mount fails it even
// when optional.
func (p VolumePolicy) Prepare(spec api.JobSpec, log zerolog.Logger) (api.JobSpec, error) {
	if len(spec.Volumes) == 0 {
		return spec, nil
	}
	out := make([]api.JobVolume, 0, len(spec.Volumes))
	for _, v := range spec.Volumes {
		if v.Managed != nil {
			out = append(out, v) // the agent's own directory (prepareManaged), not the admin's paths
			continue
		}
		real, err := p.materialize(v.HostPath)
		switch {
		case err == nil:
			v.HostPath = real
			out = append(out, v)
		case v.Optional && !errors.Is(err, ErrVolumeForbidden):
			log.Warn().Str("job", spec.ID).Str("host_path", v.HostPath).Err(err).Msg("optional volume skipped")
		default:
			return spec, fmt.Errorf("job %s: volume %s:%s: %w", spec.ID, v.HostPath, v.Path, err)
		}
	}
	spec.Volumes = out
	return spec, nil
}

// materialize checks hostPath as written, then where its deepest existing
// ancestor really leads, makes what is missing, and checks the result
// once more (a symlink planted meanwhile): the path returned is the one
// to mount. A path that leads out through a symlink is forbidden, like
// a `..` escape.
func (p VolumePolicy) materialize(hostPath string) (string, error) {
	if err := p.check(hostPath); err != nil {
		return "", err
	}
	c := filepath.Clean(hostPath)
	existing := c
	for {
		_, err := os.Lstat(existing)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		existing = filepath.Dir(existing)
	}
	base, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", err
	}
	target := filepath.Join(base, strings.TrimPrefix(c, existing))
	if err := p.checkReal(target); err != nil {
		return "", fmt.Errorf("%w: %s leads to %s: %v", ErrVolumeForbidden, c, target, unforbidden(err))
	}
	if existing != c {
		if err := makeVolumeDir(base, strings.TrimPrefix(c, existing), target); err != nil {
			return "", err
		}
	}
	real, err := filepath.EvalSymlinks(target)
	if err != nil {
		return "", err
	}
	if err := p.checkReal(real); err != nil {
		return "", fmt.Errorf("%w: %s leads to %s: %v", ErrVolumeForbidden, c, real, unforbidden(err))
	}
	return real, nil
}

// makeVolumeDir makes the missing directories rest below base, whatever
// the agent's umask (an SSH-started agent's is 077): the parents 0755,
// so a job's user can reach the volume, and the volume itself 0777, as
// dstack does, so any job user can write there. A directory someone else
// made meanwhile keeps its mode.
func makeVolumeDir(base, rest, target string) error {
	dir := base
	for _, part := range strings.Split(rest, "/") {
		if part == "" {
			continue
		}
		dir = filepath.Join(dir, part)
		err := os.Mkdir(dir, 0o755)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("make %s: %w", target, err)
		}
		mode := os.FileMode(0o755)
		if dir == target {
			mode = 0o777
		}
		if err := os.Chmod(dir, mode); err != nil {
			return fmt.Errorf("make %s: %w", target, err)
		}
	}
	return nil
}

// unforbidden is err's message without the ErrVolumeForbidden prefix.
func unforbidden(err error) string {
	return strings.TrimPrefix(err.Error(), ErrVolumeForbidden.Error()+": ")
}

// WorkRootOf is the directory of the process runtime's job working
// directories in rt ("" where it runs no processes): no volume may
// expose it, as it holds every job's files.
func WorkRootOf(rt runtime.Runtime) string {
	if u, ok := rt.(unprivileged); ok {
		rt = u.Runtime
	}
	if w, ok := rt.(interface{ WorkRoot() string }); ok {
		return w.WorkRoot()
	}
	return ""
}
