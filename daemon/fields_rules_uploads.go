package daemon

import (
	"path"
	"strings"
)

// checkUploadPath refuses a repo's or file's path that would land outside
// the job's working directory: an upload unpacks only inside the job's
// own directory, never at an absolute path of the host.
func checkUploadPath(fc *fieldCheck, _ string) *refusal {
	run := fc.cfg.Run()
	if run == nil {
		return nil
	}
	var paths []string
	for _, r := range run.Repos {
		paths = append(paths, r.Path)
	}
	for _, f := range run.Files {
		paths = append(paths, f.Path)
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		if strings.HasPrefix(p, "/") || strings.HasPrefix(p, "~") || path.Clean(p) == ".." || strings.HasPrefix(path.Clean(p), "../") {
			return &refusal{Why: "repos and files are unpacked inside the job's working directory, never at " + p,
				Instead: "give a path relative to the working directory, like data/" + path.Base(p)}
		}
	}
	return nil
}
