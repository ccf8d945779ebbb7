package daemon

import (
	"path"
	"regexp"
	"strings"

	"gpud.dev/gpud/agent"
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

// interpolation matches a ${{ ... }} reference.
var interpolation = regexp.MustCompile(`\$\{\{[^}]*\}\}`)

// checkRepoURL refuses repo URLs the agent does not clone: only http(s)
// (no ssh, file or local paths, which would use the host's keys or read
// its files). A secret may give a private repo's token
// (https://user:${{ secrets.TOKEN }}@host/repo).
func checkRepoURL(fc *fieldCheck, _ string) *refusal {
	run := fc.cfg.Run()
	if run == nil {
		return nil
	}
	for _, r := range run.Repos {
		switch {
		case r.URL == "":
		case agent.CheckRepoURL(interpolation.ReplaceAllString(r.URL, "x")) != nil:
			return &refusal{Why: "only http:// and https:// repo URLs are cloned (an ssh URL would need the host's keys)",
				Instead: "use the repo's https URL, or upload a local checkout (local_path)"}
		}
	}
	return nil
}

// checkRepoRef refuses a branch or hash on a local repo: it is uploaded as
// its working tree is, so nothing would check them out.
func checkRepoRef(fc *fieldCheck, _ string) *refusal {
	run := fc.cfg.Run()
	if run == nil {
		return nil
	}
	for _, r := range run.Repos {
		if r.LocalPath != "" && (r.Branch != "" || r.Hash != "") {
			return &refusal{Why: "a local repo is uploaded as its working tree is; branch and hash apply to a repo given by url",
				Instead: "check the branch or commit out locally before the run, or give the repo's url"}
		}
	}
	return nil
}
