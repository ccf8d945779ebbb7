package daemon

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/internal/upload"
)

// uploadRun does what gpud run does for a configuration with repos or
// files: it packs and uploads them, then applies the run naming the
// archive. It returns the archive's SHA-256.
func (ts *testServer) uploadRun(yaml, baseDir string) string {
	ts.t.Helper()
	cfg, err := api.Parse("test.yml", []byte(yaml))
	if err != nil {
		ts.t.Fatal(err)
	}
	cl, err := api.NewClient(ts.URL(), ts.admin, nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	sum, err := upload.Send(context.Background(), cl, "main", cfg.Run(), baseDir, 0, nil)
	if err != nil {
		ts.t.Fatalf("upload: %v", err)
	}
	req := yamlApply(yaml)
	req.Upload = sum
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", req, nil)
	return sum
}

// TestFilesAndReposArriveInTheJobsWorkingDir: a task's `repos: [.]`-style
// local tree and its `files` mapping are uploaded and unpacked into the
// job's working directory before its commands run; the job lists and
// reads them. Paths the tree's .gitignore, .dstackignore or .gpudignore
// leave out, and .git, never arrive.
func TestFilesAndReposArriveInTheJobsWorkingDir(t *testing.T) {
	ts := startServer(t, "")
	base := t.TempDir()
	testutil.WriteFiles(t, filepath.Join(base, "repo"), map[string]string{
		".gitignore":            "*.log\nsecrets/\n",
		".gpudignore":           "big/\n",
		"train.py":              "print('training')\n",
		"pkg/model.py":          "MODEL = 'tiny'\n",
		"debug.log":             "ignored by .gitignore",
		"secrets/key.pem":       "ignored directory",
		"big/weights.bin":       "ignored by .gpudignore",
		".git/HEAD":             "ref: refs/heads/main\n",
		"nested/.gitignore":     "local-only.txt\n",
		"nested/local-only.txt": "ignored below nested",
		"nested/kept.txt":       "kept",
	})
	testutil.WriteFiles(t, base, map[string]string{"settings.json": `{"lr": 0.1}`})
	yaml := `type: task
name: tree
repos:
  - repo
files:
  - settings.json:conf/app.json
commands:
  - find . -type f ! -name mpi_hostfile ! -path './.gpud/*' | sort | sed 's/^/seen /'
  - cat conf/app.json; echo
  - cat pkg/model.py
`
	ts.uploadRun(yaml, base)
	out := ts.logsOf("tree", "done")
	t.Logf("the job's output:\n%s", out)
	for _, want := range []string{"seen ./train.py", "seen ./pkg/model.py", "seen ./nested/kept.txt", "seen ./conf/app.json",
		"seen ./.gitignore", `{"lr": 0.1}`, "MODEL = 'tiny'"} {
		if !strings.Contains(out, want) {
			t.Errorf("the job's output lacks %q:\n%s", want, out)
		}
	}
	for _, absent := range []string{"debug.log", "key.pem", "weights.bin", ".git/", "local-only.txt"} {
		if strings.Contains(out, absent) {
			t.Errorf("the job sees %s, which is ignored:\n%s", absent, out)
		}
	}
}

// TestUploadOverTheLimitIsRefusedBeforeAnyByteIsStored: a server with a
// 64 KiB upload limit refuses a larger archive from its declared size,
// with an error that says the size, the limit and the fix; the body is
// never sent and nothing is stored.
func TestUploadOverTheLimitIsRefusedBeforeAnyByteIsStored(t *testing.T) {
	ts := startServerWith(t, Options{Runtime: "process", MaxUploadBytes: 64 << 10})
	big := make([]byte, 256<<10)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	cl, err := api.NewClient(ts.URL(), ts.admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := &api.RunSpec{Repos: []api.Repo{{LocalPath: "."}}}
	_, err = upload.Send(context.Background(), cl, "main", spec, dir, 0, nil)
	var se *api.ServerError
	if !errors.As(err, &se) || se.Status != http.StatusRequestEntityTooLarge || se.Code != api.CodeBodyTooLarge ||
		!strings.Contains(se.Message, "limit of 64 KiB") || !strings.Contains(se.Message, ".gpudignore") {
		t.Fatalf("upload over the limit: %v, want 413 body_too_large naming the 64 KiB limit and .gpudignore", err)
	}
	// The same through a raw body that counts what the server pulled.
	body := &countingReader{r: bytes.NewReader(big)}
	sum := sha256.Sum256(big)
	if _, err := cl.Upload(context.Background(), "main", hex.EncodeToString(sum[:]), int64(len(big)), body); !api.IsStatus(err, http.StatusRequestEntityTooLarge) {
		t.Fatalf("raw upload over the limit: %v, want 413", err)
	}
	if body.n != 0 {
		t.Errorf("the client sent %d bytes of a body the server refused from its declared size", body.n)
	}
	entries, err := os.ReadDir(filepath.Join(ts.opts.DataDir, "uploads", "main"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("the refused upload left %d files in the server's data dir", len(entries))
	}
}

type countingReader struct {
	r *bytes.Reader
	n int
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += n
	return n, err
}

// escapeArchive is a tar.gz with one entry that tries to leave the job's
// directory.
func escapeArchive(t *testing.T, h *tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, hdr := range []*tar.Header{{Name: "ok.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2}, h} {
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			if _, err := tw.Write(bytes.Repeat([]byte("x"), int(hdr.Size))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestUploadArchivesThatEscapeAreRefused: an archive with a "../" entry,
// an absolute path, or a symbolic link pointing out of the upload is
// refused at upload with an error naming the entry; nothing is stored, and
// a run naming it is refused. A run can name only its own project's
// upload.
func TestUploadArchivesThatEscapeAreRefused(t *testing.T) {
	ts := startServer(t, "")
	cl, err := api.NewClient(ts.URL(), ts.admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		hdr  *tar.Header
		want string
	}{
		{"dot-dot entry", &tar.Header{Name: "../../etc/cron.d/evil", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3}, `".." is not allowed`},
		{"absolute entry", &tar.Header{Name: "/etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3}, "absolute paths"},
		{"link to an absolute path", &tar.Header{Name: "escape", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, "only relative links"},
		{"link climbing out", &tar.Header{Name: "a/escape", Typeflag: tar.TypeSymlink, Linkname: "../../.."}, "points outside"},
	}
	yaml := "type: task\nname: evil\nrepos: [.]\ncommands: [ls]\n"
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := escapeArchive(t, tc.hdr)
			s := sha256.Sum256(data)
			sum := hex.EncodeToString(s[:])
			_, err := cl.Upload(context.Background(), "main", sum, int64(len(data)), bytes.NewReader(data))
			var se *api.ServerError
			if !errors.As(err, &se) || se.Status != http.StatusBadRequest || !strings.Contains(se.Message, tc.want) {
				t.Fatalf("upload: %v, want 400 saying %q", err, tc.want)
			}
			if _, err := os.Stat(ts.uploadPath("main", sum)); !os.IsNotExist(err) {
				t.Errorf("the refused archive is stored: %v", err)
			}
			req := yamlApply(yaml)
			req.Upload = sum
			if status, se := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/apply", req, nil); status != http.StatusBadRequest || se.Field != "upload" {
				t.Errorf("apply naming the refused upload: %d %s (%s), want 400 on upload", status, se.Code, se.Message)
			}
		})
	}
	// An upload of another project cannot be named; nor can repos go
	// without an upload; nor a path outside the working directory.
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{"a.txt": "a"})
	sum, err := upload.Send(context.Background(), cl, "other", &api.RunSpec{Repos: []api.Repo{{LocalPath: "."}}}, dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := yamlApply(yaml)
	req.Upload = sum
	if status, se := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/apply", req, nil); status != http.StatusBadRequest || !strings.Contains(se.Message, "has no upload") {
		t.Errorf("apply naming another project's upload: %d %s (%s), want 400 no upload", status, se.Code, se.Message)
	}
	if status, se := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(yaml), nil); status != http.StatusBadRequest || se.Field != "configuration.repos" {
		t.Errorf("apply of repos without an upload: %d %s (%s), want 400 on configuration.repos", status, se.Code, se.Message)
	}
	ts.refusedAt("type: task\ncommands: [ls]\nfiles:\n  - x.txt:/etc/x.txt\n", "files[0].path", "inside the job's working directory")
}

// TestFilesAndReposArriveInADockerJobsWorkingDir: in Docker, the repos
// and files are copied into the container before it starts, under its
// working directory (/workflow when the run sets none, as dstack's repo
// directory), and the commands start there.
func TestFilesAndReposArriveInADockerJobsWorkingDir(t *testing.T) {
	ts := startContainerServer(t, Options{})
	base := t.TempDir()
	testutil.WriteFiles(t, filepath.Join(base, "repo"), map[string]string{
		".gitignore":   "*.log\n",
		"train.py":     "print('training')\n",
		"pkg/model.py": "MODEL = 'tiny'\n",
		"debug.log":    "ignored",
	})
	testutil.WriteFiles(t, base, map[string]string{"settings.json": `{"lr": 0.1}`})
	yaml := `type: task
name: dtree
repos:
  - repo
files:
  - settings.json:conf/app.json
commands:
  - echo cwd=$(pwd)
  - find . -type f | sort | sed 's/^/seen /'
  - cat conf/app.json; echo
` + smallResources
	ts.uploadRun(yaml, base)
	run := ts.waitRunEnd("dtree", 90*time.Second)
	out := strings.Join(ts.runLogs("dtree"), "\n")
	t.Logf("run %s (%s), output:\n%s", run.Status, run.Reason, out)
	for _, want := range []string{"cwd=/workflow", "seen ./train.py", "seen ./pkg/model.py", "seen ./conf/app.json", `{"lr": 0.1}`} {
		if !strings.Contains(out, want) {
			t.Errorf("the job's output lacks %q", want)
		}
	}
	if strings.Contains(out, "debug.log") {
		t.Errorf("the job sees debug.log, which .gitignore leaves out")
	}
	// A job with a numeric user owns what arrives, and may write beside it.
	ts.uploadRun(`type: task
name: duser
user: "65534:65534"
repos:
  - repo
commands:
  - stat -c 'owner=%u:%g' train.py pkg/model.py
  - touch made-here && echo wrote=yes
`+smallResources, base)
	run = ts.waitRunEnd("duser", 90*time.Second)
	out = strings.Join(ts.runLogs("duser"), "\n")
	t.Logf("run %s (%s), output:\n%s", run.Status, run.Reason, out)
	if strings.Count(out, "owner=65534:65534") != 2 || !strings.Contains(out, "wrote=yes") {
		t.Errorf("a job of user 65534 does not own its files or cannot write its working directory")
	}
}

// TestUploadsNoRunNamesAreSweptAfterADay: an archive no job names goes a
// day after its last upload (at the next stored upload); one a run names
// stays, however old.
func TestUploadsNoRunNamesAreSweptAfterADay(t *testing.T) {
	ts := startServer(t, "")
	cl, err := api.NewClient(ts.URL(), ts.admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	send := func(body string) string {
		dir := t.TempDir()
		testutil.WriteFiles(t, dir, map[string]string{"f.txt": body})
		sum, err := upload.Send(context.Background(), cl, "main", &api.RunSpec{Repos: []api.Repo{{LocalPath: "."}}}, dir, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	orphan := send("never applied")
	base := t.TempDir()
	testutil.WriteFiles(t, filepath.Join(base, "repo"), map[string]string{"f.txt": "named by a run"})
	named := ts.uploadRun("type: task\nname: keeper\nrepos: [repo]\ncommands: [cat f.txt]\n", base)
	ts.logsOf("keeper", "done")
	old := time.Now().Add(-48 * time.Hour)
	for _, sum := range []string{orphan, named} {
		if err := os.Chtimes(ts.uploadPath("main", sum), old, old); err != nil {
			t.Fatal(err)
		}
	}
	fresh := send("a new upload")
	for sum, want := range map[string]bool{orphan: false, named: true, fresh: true} {
		_, err := os.Stat(ts.uploadPath("main", sum))
		if got := err == nil; got != want {
			t.Errorf("upload %s kept=%v, want %v", sum[:12], got, want)
		}
	}
}
