package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"gpud.dev/gpud/api"
)

// This file holds gpud-managed volumes on the host side: a volume is a
// directory the agent owns under its data dir,
// <data dir>/volumes/<project>/<volume id>, made on the first job that
// mounts it and removed only when the server deletes the volume. Its path
// comes from ids the agent validates (api.CheckManagedVolumeRef), never
// from a path the server or a user sent, so it never lies outside the
// volumes root. A job mounts it at its path through a Docker bind mount;
// the process runtime cannot mount it elsewhere than where it lies, so the
// server places such jobs on Docker hosts only.

// ErrVolumeInUse marks a managed volume a job of this host still mounts.
var ErrVolumeInUse = errors.New("volume in use")

// maxUsageEntries bounds the walk that measures a volume's usage.
const maxUsageEntries = 200_000

// managedVolumesRoot is the directory of this agent's managed volumes.
func (a *Agent) managedVolumesRoot() (string, error) {
	abs, err := filepath.Abs(a.cfg.DataDir)
	if err != nil {
		return "", err
	}
	return filepath.Join(abs, "volumes"), nil
}

// managedVolumeDir is the directory of ref below the volumes root, after
// checking ref's ids.
func (a *Agent) managedVolumeDir(ref api.ManagedVolumeRef) (root, dir string, err error) {
	if err := api.CheckManagedVolumeRef(ref); err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if root, err = a.managedVolumesRoot(); err != nil {
		return "", "", err
	}
	dir = filepath.Join(root, ref.Project, ref.ID)
	if rel, err := filepath.Rel(root, dir); err != nil || !filepath.IsLocal(rel) || strings.Count(rel, string(filepath.Separator)) != 1 {
		return "", "", fmt.Errorf("%w: volume %s/%s lies outside the volumes root", ErrInvalid, ref.Project, ref.ID)
	}
	return root, dir, nil
}

// makeManagedDir makes root (0711), root/project (0711) and the volume's
// directory (0777, as dstack makes volumes, so any job user may write),
// whatever the umask, and refuses a component that is not a real
// directory (a planted symlink).
func makeManagedDir(root, dir string) error {
	if err := os.MkdirAll(filepath.Dir(root), 0o700); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(root), dir)
	if err != nil {
		return err
	}
	p := filepath.Dir(root)
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		mode := os.FileMode(0o711)
		if p == dir {
			mode = 0o777
		}
		err := os.Mkdir(p, mode)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", p)
		}
		if fi.Mode().Perm() != mode {
			if err := os.Chmod(p, mode); err != nil {
				return err
			}
		}
	}
	return nil
}

// prepareManaged gives every managed volume of spec its directory on
// this host (made on first use) as its host path.
func (a *Agent) prepareManaged(spec api.JobSpec) (api.JobSpec, error) {
	for i, v := range spec.Volumes {
		if v.Managed == nil {
			continue
		}
		root, dir, err := a.managedVolumeDir(*v.Managed)
		if err != nil {
			return spec, fmt.Errorf("job %s: volume %s: %w", spec.ID, v.Managed.Name, err)
		}
		if err := makeManagedDir(root, dir); err != nil {
			return spec, fmt.Errorf("job %s: volume %s: make its directory: %w", spec.ID, v.Managed.Name, err)
		}
		spec.Volumes[i].HostPath = dir
	}
	return spec, nil
}

// managedInUse names the jobs of this host not yet finished that mount
// the volume.
func (a *Agent) managedInUse(ref api.ManagedVolumeRef) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ids []string
	for id, j := range a.jobs {
		if j.rec.Status.State.Finished() {
			continue
		}
		for _, v := range j.rec.Spec.Volumes {
			if v.Managed != nil && v.Managed.Project == ref.Project && v.Managed.ID == ref.ID {
				ids = append(ids, id)
				break
			}
		}
	}
	return ids
}

// RemoveManagedVolume deletes a managed volume's directory and its data;
// it refuses while a job of this host mounts it. A volume never made
// here is no error.
func (a *Agent) RemoveManagedVolume(ref api.ManagedVolumeRef) error {
	_, dir, err := a.managedVolumeDir(ref)
	if err != nil {
		return err
	}
	if jobs := a.managedInUse(ref); len(jobs) > 0 {
		return fmt.Errorf("%w: jobs %s mount it", ErrVolumeInUse, strings.Join(jobs, ", "))
	}
	// RemoveAll does not follow the symlinks a job may have made inside.
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove volume %s: %w", ref.Name, err)
	}
	return nil
}

// ManagedVolumeUsage measures a managed volume's directory: the bytes
// its files take (-1 past maxUsageEntries) and its filesystem's free space.
func (a *Agent) ManagedVolumeUsage(ref api.ManagedVolumeRef) (api.VolumeUsage, error) {
	root, dir, err := a.managedVolumeDir(ref)
	if err != nil {
		return api.VolumeUsage{}, err
	}
	var u api.VolumeUsage
	statAt := dir
	if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
		u.Exists = true
		n := 0
		err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // a file removed meanwhile, or unreadable: skipped
			}
			if n++; n > maxUsageEntries {
				return filepath.SkipAll
			}
			if d.Type().IsRegular() {
				if info, err := d.Info(); err == nil {
					u.Used += api.Size(info.Size())
				}
			}
			return nil
		})
		if err != nil || n > maxUsageEntries {
			u.Used = -1
		}
	} else {
		statAt = a.cfg.DataDir
		if _, err := os.Stat(root); err == nil {
			statAt = root
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(statAt, &st); err == nil {
		u.DiskFree = api.Size(st.Bavail) * api.Size(st.Bsize)
	}
	return u, nil
}
