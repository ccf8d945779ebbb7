package daemon

import (
	"path"
	"regexp"
	"strconv"
	"strings"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/internal/upload"
)

// checkUploadPath refuses a repo's or file's path that names no place a
// job can have: one that climbs out of the working directory ("..") or
// is not clean, another user's ~, or the container's root itself. An
// absolute or ~/ path is placed in the container (the process runtime
// refuses it: uploadTargetOutside).
func checkUploadPath(fc *fieldCheck, p string) *refusal {
	v, ok := uploadPathAt(fc, p)
	if !ok || v == "" {
		return nil
	}
	if err := upload.CheckTarget(v); err != nil {
		return &refusal{Why: err.Error(),
			Instead: "give a path relative to the working directory, like data/" + path.Base(v) + ", or a clean absolute one, like /data/" + path.Base(v)}
	}
	return nil
}

// uploadTargetOutside reports whether the repo's or file's path at p lies
// outside the job's working directory (absolute, or under ~): only a
// container can take it, so the process runtime refuses it.
func uploadTargetOutside(fc *fieldCheck, p string) bool {
	v, _ := uploadPathAt(fc, p)
	return strings.HasPrefix(v, "/") || strings.HasPrefix(v, "~")
}

// refuseUploadTargetOnProcess is the process runtime's refusal of an
// absolute or ~/ repo or file path.
var refuseUploadTargetOnProcess = map[fieldTarget]refusal{targetProcess: {
	Why:     "the process runtime unpacks repos and files only inside the job's working directory, never at an absolute path of the host",
	Instead: "use a relative path, or run on a Docker host (set image)"}}

// uploadPathAt reads the value of repos[i].path or files[i].path.
func uploadPathAt(fc *fieldCheck, p string) (string, bool) {
	run := fc.cfg.Run()
	if run == nil {
		return "", false
	}
	m := indexedPath.FindStringSubmatch(p)
	if m == nil {
		return "", false
	}
	i, err := strconv.Atoi(m[2])
	if err != nil {
		return "", false
	}
	switch {
	case m[1] == "repos" && i < len(run.Repos):
		return run.Repos[i].Path, true
	case m[1] == "files" && i < len(run.Files):
		return run.Files[i].Path, true
	}
	return "", false
}

// indexedPath matches "repos[2].path" and "files[0].path".
var indexedPath = regexp.MustCompile(`^(repos|files)\[(\d+)\]\.path$`)

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
