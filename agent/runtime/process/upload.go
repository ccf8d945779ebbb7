package process

import (
	"fmt"
	"os"
	"path/filepath"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/untar"
)

// unpackUpload unpacks the job's upload (its run's repos and files) into
// cwd, the directory its commands start in, which must lie inside the
// job's own working directory: an upload never lands anywhere else on the
// host. The files belong to the job's user.
func unpackUpload(uploadDir string, spec api.JobSpec, workDir, cwd string, c *credential) error {
	if spec.Upload == "" {
		return nil
	}
	if rel, err := filepath.Rel(workDir, cwd); err != nil || (rel != "." && !filepath.IsLocal(rel)) {
		return fmt.Errorf("repos and files unpack into the job's own directory; working_dir %q lies outside it (use a relative working_dir)", spec.WorkingDir)
	}
	if uploadDir == "" {
		return fmt.Errorf("upload %s: this runtime has no upload directory", spec.Upload)
	}
	f, err := os.Open(filepath.Join(uploadDir, spec.Upload+".tar.gz"))
	if err != nil {
		return fmt.Errorf("upload %s: %w", spec.Upload, err)
	}
	defer f.Close()
	var owner *untar.Owner
	if c != nil && c.uid != uint32(os.Geteuid()) {
		owner = &untar.Owner{UID: int(c.uid), GID: int(c.gid)}
	}
	if err := untar.Extract(f, cwd, untar.DefaultLimits, owner); err != nil {
		return fmt.Errorf("unpack the run's repos and files: %w", err)
	}
	return nil
}
