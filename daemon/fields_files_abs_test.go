package daemon

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/internal/upload"
)

// TestFilesAndReposArriveAtAbsolutePathsInADockerJob: dstack's targets
// outside the working directory — a file at /root/.ssh/id_rsa, a repo at
// /my-repo, a file under ~ (the container user's home, /root for root) —
// arrive at those paths inside a Docker job's container, beside a
// relative file in the working directory; the reserved names that carry
// them in the archive never show in the working directory.
func TestFilesAndReposArriveAtAbsolutePathsInADockerJob(t *testing.T) {
	ts := startContainerServer(t, Options{})
	base := t.TempDir()
	testutil.WriteFiles(t, base, map[string]string{
		"id_rsa":        "PRIVATE KEY",
		"app.json":      `{"lr": 0.1}`,
		"notes.txt":     "beside the commands",
		"repo/train.py": "print('training')\n",
	})
	yaml := `type: task
name: dabs
repos:
  - local_path: repo
    path: /my-repo
files:
  - id_rsa:/root/.ssh/id_rsa
  - app.json:~/.config/app.json
  - notes.txt:notes.txt
commands:
  - echo key=$(cat /root/.ssh/id_rsa)
  - echo repo=$(cat /my-repo/train.py)
  - echo conf=$(cat /root/.config/app.json)
  - echo notes=$(cat notes.txt)
  - ls -a . | sed 's/^/wd /'
` + smallResources
	ts.uploadRun(yaml, base)
	run := ts.waitRunEnd("dabs", 90*time.Second)
	out := strings.Join(ts.runLogs("dabs"), "\n")
	t.Logf("run %s (%s), output:\n%s", run.Status, run.Reason, out)
	if run.Status != "done" {
		t.Errorf("run %s (%s), want done", run.Status, run.Reason)
	}
	for _, want := range []string{"key=PRIVATE KEY", "repo=print('training')", `conf={"lr": 0.1}`, "notes=beside the commands"} {
		if !strings.Contains(out, want) {
			t.Errorf("the job's output lacks %q", want)
		}
	}
	if strings.Contains(out, ".gpud-") {
		t.Errorf("a reserved archive name shows in the working directory")
	}
	// A user whose home ~ cannot name (the test image's nobody has /)
	// fails at start with the reason, rather than get the file elsewhere.
	ts.uploadRun(`type: task
name: dnohome
user: "65534:65534"
files:
  - app.json:~/.config/app.json
commands:
  - cat /.config/app.json
`+smallResources, base)
	run = ts.waitRunEnd("dnohome", 90*time.Second)
	t.Logf("run dnohome: %s (%s)", run.Status, run.Reason)
	if run.Status != "failed" || !strings.Contains(run.Reason+strings.Join(ts.runLogs("dnohome"), "\n"), "home") {
		var full api.Run
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/dnohome", nil, &full)
		t.Errorf("a ~ target for a user without a home: run %s (%s), jobs %+v; want failed naming the home", run.Status, run.Reason, full.Jobs)
	}
}

// TestAbsoluteUploadTargetsAreRefusedOnTheProcessRuntime: the process
// runtime unpacks only inside the job's own directory on the host, so a
// run with an absolute or ~/ target is refused by the field's name there,
// while a relative one plans; a target that climbs out or is not clean is
// refused everywhere.
func TestAbsoluteUploadTargetsAreRefusedOnTheProcessRuntime(t *testing.T) {
	ts := startServer(t, "")
	base := t.TempDir()
	testutil.WriteFiles(t, base, map[string]string{"id_rsa": "k"})
	cl, err := api.NewClient(ts.URL(), ts.admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	plan := func(yaml string) (int, api.ServerError) {
		t.Helper()
		cfg, err := api.Parse("test.yml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		req := yamlApply(yaml)
		if sum, err := upload.Send(context.Background(), cl, "main", cfg.Run(), base, 0, nil); err == nil {
			req.Upload = sum
		}
		return ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/plan", req, nil)
	}
	for target, want := range map[string]string{
		"/root/.ssh/id_rsa": "files[0].path: not honoured on the process runtime",
		"~/.ssh/id_rsa":     "files[0].path: not honoured on the process runtime",
		"/a/../../etc/x":    "files[0].path: not honoured by gpud",
		"../x":              "files[0].path: not honoured by gpud",
	} {
		status, se := plan("type: task\ncommands: [true]\nfiles:\n  - id_rsa:" + target + "\n")
		if status != http.StatusUnprocessableEntity || se.Code != api.CodeNotHonoured || !strings.Contains(strings.Join(se.Errors, "\n"), want) {
			t.Errorf("target %s: %d %s %q, want 422 naming %q", target, status, se.Code, se.Errors, want)
		}
	}
	if status, se := plan("type: task\ncommands: [true]\nfiles:\n  - id_rsa:" + filepath.Join("keys", "id_rsa") + "\n"); status != http.StatusOK {
		t.Errorf("a relative target: %d %s, want it planned", status, se.Error())
	}
}
