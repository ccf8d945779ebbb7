package daemon

import (
	"encoding/json"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// gitServer serves a bare repository over smart HTTP (git http-backend)
// with two commits on main and a branch "feature"; it returns the repo's
// URL and the first commit's hash. With auth ("user:password") it answers
// 401 to requests without those credentials.
func gitServer(t *testing.T, auth string) (repoURL, firstCommit string) {
	t.Helper()
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git is needed to serve a repository over HTTP (apt-get install git; .ci/test installs it): %v", err)
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
	testutil.WriteFiles(t, src, map[string]string{"README": "first\n"})
	git(src, "add", ".")
	git(src, "commit", "--quiet", "-m", "first")
	first := git(src, "rev-parse", "HEAD")
	testutil.WriteFiles(t, src, map[string]string{"README": "second\n"})
	git(src, "commit", "--quiet", "-am", "second")
	git(src, "checkout", "--quiet", "-b", "feature")
	testutil.WriteFiles(t, src, map[string]string{"FEATURE": "on the branch\n"})
	git(src, "add", ".")
	git(src, "commit", "--quiet", "-m", "feature")
	git(work, "clone", "--quiet", "--bare", src, filepath.Join(root, "app.git"))
	h := &cgi.Handler{Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	var handler http.Handler = h
	if auth != "" {
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u+":"+p != auth {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(handler)
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
	repo, first := gitServer(t, "")
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

// TestPrivateRepoURLTakesItsTokenFromASecret: a private repo's token comes
// from the project's secrets (https://user:${{ secrets.X }}@host/repo); the
// clone works, and the token reaches neither the job's tree (.git/config),
// nor the run's stored spec, nor the error of a clone that fails.
func TestPrivateRepoURLTakesItsTokenFromASecret(t *testing.T) {
	repo, _ := gitServer(t, "oauth2:s3cret-token")
	ts := startServer(t, "")
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/secrets/GIT_TOKEN", api.SetSecretRequest{Value: "s3cret-token"}, nil)
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/secrets/BAD_TOKEN", api.SetSecretRequest{Value: "wr0ng-token"}, nil)
	private := strings.Replace(repo, "http://", "http://oauth2:${{ secrets.GIT_TOKEN }}@", 1)
	ts.submit("type: task\nname: private\nrepos:\n  - " + private + "\ncommands:\n  - echo readme=$(cat README)\n  - echo leaks=$(grep -c s3cret\"\"-token .git/config)\n")
	out := ts.logsOf("private", "done")
	if !strings.Contains(out, "readme=second") || !strings.Contains(out, "leaks=0") {
		t.Errorf("the private clone: output %q, want readme=second and leaks=0", out)
	}
	b, err := json.Marshal(ts.getRun("private"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "s3cret-token") {
		t.Errorf("the run's API view shows the token: %s", b)
	}
	bad := strings.Replace(repo, "http://", "http://oauth2:${{ secrets.BAD_TOKEN }}@", 1)
	ts.submit("type: task\nname: denied\nrepos:\n  - " + bad + "\ncommands: [ls]\n")
	run := ts.waitRun("denied", "failed", "", 60*time.Second)
	b, err = json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("denied: %s", run.Reason)
	if strings.Contains(string(b), "wr0ng-token") {
		t.Errorf("the failed clone's run shows the token: %s", b)
	}
}
