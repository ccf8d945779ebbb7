package upload

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// A repo or file whose target lies outside the job's working directory
// (dstack's `~/.ssh/id_rsa:/root/.ssh/id_rsa`, `path: /my-repo`) travels
// in the archive under one of two reserved top-level directories, as a
// relative name like every other entry, so untar's rules (no "..", links
// relative and inside, limits) hold for it unchanged:
//
//   - RootDir/etc/app.conf lands at /etc/app.conf in the container;
//   - HomeDir/.ssh/id_rsa lands at .ssh/id_rsa under the container user's
//     home (/root for root).
//
// Only the Docker runtime places them, inside the container's own
// filesystem (agent/runtime/docker); the plan keeps a run with such a
// target off the process runtime, which unpacks only inside the job's
// directory on the host.
const (
	RootDir = ".gpud-root"
	HomeDir = ".gpud-home"
)

// Anchor is what an archive entry's path is relative to.
type Anchor int

const (
	// InWorkDir entries land under the job's working directory.
	InWorkDir Anchor = iota
	// AtRoot entries land at their path from the container's root.
	AtRoot
	// AtHome entries land under the container user's home directory.
	AtHome
)

// Anchored splits a cleaned, relative archive entry name into its anchor
// and its path below it ("." for the anchor's directory itself).
func Anchored(name string) (Anchor, string) {
	first, rest, _ := strings.Cut(name, "/")
	if rest == "" {
		rest = "."
	}
	switch first {
	case RootDir:
		return AtRoot, rest
	case HomeDir:
		return AtHome, rest
	}
	return InWorkDir, name
}

// cleanDest maps a repo's or file's target to its archive name: a path
// relative to the working directory as it is, an absolute one under
// RootDir, one under ~ under HomeDir. A target must be clean (no "..",
// no "." or empty parts) and may not replace the container's root.
func cleanDest(d string) (string, error) {
	switch {
	case d == "" || d == ".":
		return ".", nil
	case d == "~" || d == "~/":
		return HomeDir, nil
	case strings.HasPrefix(d, "~/"):
		rest, err := cleanTarget(d, d[2:])
		if err != nil {
			return "", err
		}
		return path.Join(HomeDir, rest), nil
	case strings.HasPrefix(d, "~"):
		return "", fmt.Errorf("path %q: only the job user's own home (~/...) is supported, not another user's; give an absolute path", d)
	case strings.HasPrefix(d, "/"):
		if strings.Trim(d, "/") == "" {
			return "", fmt.Errorf("path %q: a repo or file can not replace the container's root; name a directory like /my-repo", d)
		}
		rest, err := cleanTarget(d, d[1:])
		if err != nil {
			return "", err
		}
		return path.Join(RootDir, rest), nil
	}
	c := path.Clean(strings.TrimPrefix(d, "./"))
	if !filepath.IsLocal(filepath.FromSlash(c)) {
		return "", fmt.Errorf("path %q: a relative path lands inside the job's working directory and may not climb out of it; use a path like data/input, or an absolute one like /data/input", d)
	}
	if a, _ := Anchored(c); a != InWorkDir {
		return "", fmt.Errorf("path %q: %s and %s are names gpud reserves in an upload; choose another directory", d, RootDir, HomeDir)
	}
	return c, nil
}

// cleanTarget checks rest, the part of target d below / or ~/: clean, with
// no ".." that would climb above it.
func cleanTarget(d, rest string) (string, error) {
	r := strings.TrimSuffix(rest, "/")
	if r == "" || path.Clean(r) != r || r == ".." || strings.HasPrefix(r, "../") || strings.HasPrefix(r, "/") {
		return "", fmt.Errorf("path %q is not a clean path: write it without \"..\", \".\" or doubled slashes", d)
	}
	return r, nil
}

// CheckTarget refuses a repo's or file's target that Pack would refuse
// (climbing out, not clean, another user's ~, the container's root), with
// the reason; the plan calls it so the refusal names the field.
func CheckTarget(d string) error {
	_, err := cleanDest(d)
	return err
}
