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
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(reroot(name, strings.TrimPrefix(path.Clean(workDir), "/"), pw)) }()
	_, err = r.cli.CopyToContainer(ctx, containerID, client.CopyToContainerOptions{DestinationPath: "/", Content: pr})
	pr.CloseWithError(err)
	if err != nil {
		return fmt.Errorf("copy the run's repos and files into the container: %w", err)
	}
	return nil
}

// reroot writes the archive at name as a plain tar whose entries lie under
// prefix (a relative path; "" or "." for the container's root).
func reroot(name, prefix string, w io.Writer) error {
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
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}
