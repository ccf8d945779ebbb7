package docker

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/untar"
	"gpud.dev/gpud/internal/upload"
)

// uploadWorkDir is the working directory of a job with an upload: its
// working_dir, or /workflow when it has none (dstack's repo directory), so
// the commands start where the repos and files are.
func uploadWorkDir(spec api.JobSpec, cfg *container.Config) {
	if spec.Upload != "" && cfg.WorkingDir == "" {
		cfg.WorkingDir = legacyRepoDir
	}
}

// copyUpload copies the job's upload (its run's repos and files) into the
// created container, before it starts: entries under workDir, or at the
// absolute or ~/ target the run gave them (upload.Anchored). The archive
// passes untar's rules first (no absolute or ".." names, links relative
// and inside, bounded); its entries are then re-rooted and streamed to
// the engine, which writes them inside the container's own filesystem,
// never the host's.
func (r *Runtime) copyUpload(ctx context.Context, containerID string, spec api.JobSpec, workDir string) error {
	if spec.Upload == "" {
		return nil
	}
	if r.cfg.UploadDir == "" {
		return fmt.Errorf("upload %s: this runtime has no upload directory", spec.Upload)
	}
	name := filepath.Join(r.cfg.UploadDir, spec.Upload+".tar.gz")
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("upload %s: %w", spec.Upload, err)
	}
	err = untar.Check(f, untar.DefaultLimits)
	f.Close()
	if err != nil {
		return fmt.Errorf("the run's repos and files: %w", err)
	}
	home := ""
	if needs, err := anchorsHome(name); err != nil {
		return fmt.Errorf("upload %s: %w", spec.Upload, err)
	} else if needs {
		if home, err = r.containerHome(ctx, containerID); err != nil {
			return fmt.Errorf("the run's repos and files under ~: %w", err)
		}
	}
	dirs := rerootDirs{work: strings.TrimPrefix(path.Clean(workDir), "/"), home: strings.TrimPrefix(home, "/"), mounts: mountTargets(spec)}
	owner := numericOwner(spec.User)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(reroot(name, dirs, owner, pw)) }()
	_, err = r.cli.CopyToContainer(ctx, containerID, client.CopyToContainerOptions{DestinationPath: "/", Content: pr})
	pr.CloseWithError(err)
	if err != nil {
		return fmt.Errorf("copy the run's repos and files into the container: %w", err)
	}
	return nil
}

// numericOwner is the uid and gid of a job user given as numbers ("1000"
// or "1000:1000"), whom the copied files then belong to; nil (root) for a
// name, which only the image's passwd could resolve.
func numericOwner(user string) *[2]int {
	u, g, hasGroup := strings.Cut(user, ":")
	uid, err := strconv.Atoi(u)
	if err != nil || uid < 0 {
		return nil
	}
	gid := uid
	if hasGroup {
		if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
			return nil
		}
	}
	return &[2]int{uid, gid}
}

// rerootDirs are the container directories an upload's entries land
// under, relative to the container's root: the working directory ("" or
// "." for the root) and the job user's home ("" when no entry needs it);
// mounts are the container paths of the job's host mounts (relative to
// the root too), where an absolute or ~/ target may not land.
type rerootDirs struct {
	work, home string
	mounts     []string
}

// mountTargets lists where the job's host directories and files are
// mounted in its container: an upload's absolute target there would make
// the engine write on the host, so it is refused.
func mountTargets(spec api.JobSpec) []string {
	out := []string{strings.TrimPrefix(hostfileInContainer, "/")}
	for _, v := range spec.Volumes {
		out = append(out, strings.TrimPrefix(path.Clean(v.Path), "/"))
	}
	if spec.GPUs.MPSPipeDir != "" {
		out = append(out, strings.TrimPrefix(path.Clean(spec.GPUs.MPSPipeDir), "/"))
	}
	return out
}

// entryName is where an (untar-checked) archive entry lands, relative to
// the container's root; skip is true for an anchor's own directory entry
// (the container's root or the home, which an upload never replaces).
func (d rerootDirs) entryName(name string, isDir bool) (out string, skip bool, err error) {
	clean := path.Clean(strings.TrimSuffix(name, "/"))
	anchor, rest := upload.Anchored(clean)
	base := d.work
	switch anchor {
	case upload.AtRoot:
		base = ""
	case upload.AtHome:
		if d.home == "" {
			return "", false, fmt.Errorf("entry %q: the job user's home is not known", name)
		}
		base = d.home
	}
	if anchor != upload.InWorkDir && rest == "." {
		if !isDir {
			return "", false, fmt.Errorf("entry %q would replace a directory the container needs", name)
		}
		return "", true, nil
	}
	out = path.Join(base, rest)
	if out == "" || out == "." || path.IsAbs(out) || out == ".." || strings.HasPrefix(out, "../") {
		return "", false, fmt.Errorf("entry %q does not name a path inside the container", name)
	}
	if anchor != upload.InWorkDir {
		for _, m := range d.mounts {
			if out == m || strings.HasPrefix(out, m+"/") || m == "" {
				return "", false, fmt.Errorf("the target /%s lies in /%s, a directory of the host mounted into the job; repos and files land in the container's own filesystem (write there from the job's commands instead)", out, m)
			}
		}
	}
	return out, false, nil
}

// reroot writes the archive at name as a plain tar whose entries lie where
// dirs places them, owned by owner when not nil, the working directory
// itself included. Each header is written anew with only a name, type,
// link target, size, permission bits (no setuid, setgid or sticky), time
// and owner: extended attributes or capabilities in an upload never reach
// the engine.
func reroot(name string, dirs rerootDirs, owner *[2]int, w io.Writer) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	defer zr.Close()
	tr, tw := tar.NewReader(zr), tar.NewWriter(w)
	own := func(h *tar.Header) {
		if owner != nil {
			h.Uid, h.Gid = owner[0], owner[1]
		}
	}
	if dirs.work != "" && dirs.work != "." && owner != nil {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: dirs.work + "/", Mode: 0o755}
		own(h)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	for {
		in, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		dir := in.Typeflag == tar.TypeDir
		out, skip, err := dirs.entryName(in.Name, dir)
		if err != nil {
			return err
		}
		if skip {
			continue
		}
		h := &tar.Header{Typeflag: in.Typeflag, Name: out, Linkname: in.Linkname, Size: in.Size, Mode: in.Mode & 0o777, ModTime: in.ModTime, Uid: in.Uid, Gid: in.Gid}
		if dir {
			h.Name += "/"
		}
		own(h)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}
