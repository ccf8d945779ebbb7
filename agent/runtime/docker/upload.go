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
// created container under workDir, before it starts. The archive passes
// untar's rules first (no absolute or ".." names, links relative and
// inside, bounded); its entries are then re-rooted under workDir and
// streamed to the engine, which writes them inside the container's own
// filesystem, never the host's.
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
	owner := numericOwner(spec.User)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(reroot(name, strings.TrimPrefix(path.Clean(workDir), "/"), owner, pw)) }()
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

// reroot writes the archive at name as a plain tar whose entries lie under
// prefix (a relative path; "" or "." for the container's root), owned by
// owner when not nil, the prefix directory itself included.
func reroot(name, prefix string, owner *[2]int, w io.Writer) error {
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
			h.Uid, h.Gid, h.Uname, h.Gname = owner[0], owner[1], "", ""
		}
	}
	if prefix != "" && prefix != "." && owner != nil {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: prefix + "/", Mode: 0o755}
		own(h)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		dir := strings.HasSuffix(h.Name, "/")
		h.Name = path.Join(prefix, h.Name)
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
