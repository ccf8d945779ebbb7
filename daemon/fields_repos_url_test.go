package daemon

import (
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitServer serves a bare repository over smart HTTP (git http-backend)
// with two commits on main and a branch "feature"; it returns the repo's
// URL and the first commit's hash.
func gitServer(t *testing.T) (repoURL, firstCommit string) {
	t.Helper()
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("no git on this machine: %v", err)
	}
	root, work := t.TempDir(), t.TempDir()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+work, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git(work, "init", "--quiet", "-b", "main", "src")
	src := filepath.Join(work, "src")
	writeFiles(t, src, map[string]string{"README": "first\n"})
	git(src, "add", ".")
	git(src, "commit", "--quiet", "-m", "first")
	first := git(src, "rev-parse", "HEAD")
	writeFiles(t, src, map[string]string{"README": "second\n"})
	git(src, "commit", "--quiet", "-am", "second")
	git(src, "checkout", "--quiet", "-b", "feature")
	writeFiles(t, src, map[string]string{"FEATURE": "on the branch\n"})
	git(src, "add", ".")
	git(src, "commit", "--quiet", "-m", "feature")
	git(work, "clone", "--quiet", "--bare", src, filepath.Join(root, "app.git"))
	h := &cgi.Handler{Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/app.git", first
}

// TestRepoURLIsClonedIntoTheJobsWorkingDir: repos given by URL are cloned
// by the job's agent on its host (http(s) only, none of the host's
// credentials) and arrive in the working directory like uploaded ones,
// with their history: the default branch, a branch, and a commit hash.
// An ssh or file URL, and a branch on a local repo, are refused at plan
// time.
func TestRepoURLIsClonedIntoTheJobsWorkingDir(t *testing.T) {
	repo, first := gitServer(t)
	ts := startServer(t, "")
	ts.submit(`type: task
name: clone
repos:
  - ` + repo + `
  - url: ` + repo + `
    branch: feature
    path: feat
  - url: ` + repo + `
    hash: ` + first + `
    path: old
commands:
  - echo "main=$(cat README) feature=$(cat feat/FEATURE) old=$(cat old/README)"
  - test -d .git && echo "history=yes"
`)
	out := ts.logsOf("clone", "done")
	t.Logf("the job's output:\n%s", out)
	for _, want := range []string{"main=second feature=on the branch old=first", "history=yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("the job's output lacks %q", want)
		}
	}
	ts.refusedAt("type: task\ncommands: [ls]\nrepos:\n  - url: git@github.com:dstackai/dstack.git\n", "repos[0].url", "only http:// and https://")
	ts.refusedAt("type: task\ncommands: [ls]\nrepos:\n  - url: file:///etc\n", "repos[0].url", "only http:// and https://")
	ts.refusedAt("type: task\ncommands: [ls]\nrepos:\n  - local_path: .\n    branch: main\n", "repos[0].branch", "working tree")
}
