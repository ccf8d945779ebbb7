package daemon

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/internal/testutil/dockerimage"
)

// The e2e proofs of the container fields (fields_rules_container.go):
// each job prints what it sees from inside, and the test reads it from
// the run's logs.

// randomWord is a fresh lowercase hex word, for image tags and secrets.
func randomWord(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// buildTestImage imports the busybox test image plus files (path ->
// content, executable) under ref, and removes it when the test ends (after
// the server's containers, when called before the server starts).
func buildTestImage(t *testing.T, ref string, files map[string]string) {
	t.Helper()
	base, err := dockerimage.Rootfs()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tr := tar.NewReader(bytes.NewReader(base))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		dir := filepath.Dir(name)
		if dir != "." && dir != "bin" && dir != "etc" {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755}); err != nil {
				t.Fatal(err)
			}
		}
		body := files[name]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: &buf, SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: []string{`CMD ["/bin/sh"]`, "ENV PATH=/usr/local/bin:/bin"}})
	if err != nil {
		t.Fatalf("import %s: %v", ref, err)
	}
	_, err = io.Copy(io.Discard, res)
	res.Close()
	if err != nil {
		t.Fatalf("import %s: %v", ref, err)
	}
	t.Cleanup(func() {
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true}); err != nil {
			t.Errorf("remove image %s: %v", ref, err)
		}
	})
}

// smallResources are resources any test host has; a task's extra YAML
// that sets resources starts with them.
const smallResources = "resources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n"

// task is a task with commands and extra top-level YAML, asking for
// smallResources unless extra sets resources.
func task(name, extra string, commands ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "type: task\nname: %s\n%s", name, extra)
	if !strings.Contains(extra, "resources:") {
		b.WriteString(smallResources)
	}
	if len(commands) > 0 {
		b.WriteString("commands:\n")
		for _, c := range commands {
			fmt.Fprintf(&b, "  - %q\n", c)
		}
	}
	return b.String()
}

// runOutput submits yaml, waits for the run to end and returns it with
// its output; it fails the test unless the run is want.
func (ts *testServer) runOutput(name, yaml, want string) (api.Run, []string) {
	ts.t.Helper()
	ts.submit(yaml)
	run := ts.waitRunEnd(name, 90*time.Second)
	out := ts.runLogs(name)
	ts.t.Logf("run %s: %s (%s): %q", name, run.Status, run.Reason, out)
	if want != "" && run.Status != want {
		ts.t.Fatalf("run %s: %s (%s), want %s; output %q", name, run.Status, run.Reason, want, out)
	}
	return run, out
}

// refusedAt plans yaml and fails the test unless the plan refuses it with
// an error that names field and says why with words.
func (ts *testServer) refusedAt(yaml, field string, words ...string) {
	ts.t.Helper()
	status, se := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(yaml), nil)
	if status != http.StatusUnprocessableEntity || se.Code != api.CodeNotHonoured {
		ts.t.Fatalf("plan of a run setting %s: %d %s %q, want 422 %s", field, status, se.Code, se.Errors, api.CodeNotHonoured)
	}
	for _, e := range se.Errors {
		if !strings.Contains(e, ": "+field+": ") {
			continue
		}
		for _, w := range words {
			if !strings.Contains(e, w) {
				ts.t.Fatalf("refusal of %s: %q lacks %q", field, e, w)
			}
		}
		return
	}
	ts.t.Fatalf("the refusal does not name %s: %q", field, se.Errors)
}

// A run's image is what its job runs in: the job reads a file only that
// image has.
func TestImageRunsSeeTheirImagesFiles(t *testing.T) {
	marker := randomWord(t)
	ref := "gpud-test/marked:" + marker
	buildTestImage(t, ref, map[string]string{"etc/gpud-marker": marker + "\n"})
	ts := startContainerServer(t, Options{})
	_, out := ts.runOutput("marked", task("marked", "image: "+ref+"\n", "cat /etc/gpud-marker"), "done")
	if !slices.Contains(out, marker) {
		t.Fatalf("output %q, want the image's marker %s", out, marker)
	}
}

// registry_auth reaches the pull: a registry that asks for credentials
// gets the run's (the password from a secret), and they land in no file
// of the server's data dir (state, agent.db, logs), in no server log line
// and in none of the run's logs, events or reasons.
func TestRegistryAuthReachesThePullAndNoFileOrLog(t *testing.T) {
	password := "pw-" + randomWord(t)
	var mu sync.Mutex
	var seen []string
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		auth := r.Header.Get("Authorization")
		if auth == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="gpud-test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		seen = append(seen, auth)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"no such image here"}]}`)
	}))
	defer reg.Close()
	var logs lockedBuffer
	ts := startContainerServer(t, Options{Logger: zerolog.New(&logs)})
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/secrets/REGISTRY_PASSWORD", api.SetSecretRequest{Value: password}, nil)
	image := strings.TrimPrefix(reg.URL, "http://") + "/gpud-test/private:latest"
	run, _ := ts.runOutput("private", task("private", "image: "+image+"\nregistry_auth:\n  username: alice\n  password: ${{ secrets.REGISTRY_PASSWORD }}\n", "true"), "failed")
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+password))
	mu.Lock()
	got := slices.Clone(seen)
	mu.Unlock()
	if !slices.Contains(got, want) {
		t.Fatalf("the registry saw %q, want the run's credentials; run %s (%s)", got, run.Status, run.Reason)
	}
	var events []api.Event
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/events", nil, &events)
	for what, text := range map[string]string{"run reason": run.Reason, "events": fmt.Sprint(events), "run logs": strings.Join(ts.runLogs("private"), "\n"), "server log": logs.String()} {
		if strings.Contains(text, password) {
			t.Errorf("the password is in the %s", what)
		}
	}
	err := filepath.WalkDir(ts.opts.DataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(password)) {
			t.Errorf("the password is in %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// lockedBuffer is a bytes.Buffer for a logger written from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// user, working_dir and resources.shm_size on Docker: the job runs as the
// given uid and gid, starts in its working directory (made, as the image
// lacks it; a relative one lies under dstack's /workflow) and has a
// /dev/shm of the given size.
func TestDockerJobsRunAsTheirUserInTheirWorkingDirWithTheirShm(t *testing.T) {
	ts := startContainerServer(t, Options{})
	_, out := ts.runOutput("as-user", task("as-user", "user: \"65534:65534\"\nworking_dir: /srv/made/here\n"+smallResources+"  shm_size: 64MB\n",
		"echo uid=$(id -u) gid=$(id -g)", "echo cwd=$(pwd)", "df -k /dev/shm | tail -1"), "done")
	for _, want := range []string{"uid=65534 gid=65534", "cwd=/srv/made/here"} {
		if !slices.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	if len(out) != 3 || !slices.Contains(strings.Fields(out[2]), "65536") {
		t.Errorf("output %q: /dev/shm is not 64MB (65536 1K-blocks)", out)
	}
	_, out = ts.runOutput("relative", task("relative", "working_dir: sub/dir\n", "echo cwd=$(pwd)"), "done")
	if !slices.Contains(out, "cwd=/workflow/sub/dir") {
		t.Errorf("relative working_dir: output %q, want cwd=/workflow/sub/dir", out)
	}
}

// entrypoint replaces the image's, and the commands are its arguments,
// one each, as dstack passes them (not lines of a shell script).
func TestEntrypointTakesTheCommandsAsItsArguments(t *testing.T) {
	ts := startContainerServer(t, Options{})
	yaml := task("entry", `entrypoint: "/bin/sh -c 'for a; do echo \"arg:$a\"; done' entry"`+"\n", "one two", "three")
	_, out := ts.runOutput("entry", yaml, "done")
	if !slices.Equal(out, []string{"arg:one two", "arg:three"}) {
		t.Fatalf("output %q, want each command as one argument of the entrypoint", out)
	}
	ts.refusedAt(task("bad-entry", "entrypoint: \"sh -c 'unclosed\"\n", "x"), "entrypoint", "quote")
}

// python on Docker: a run without an image gets the server's Python image
// for that version (--python-image, {python} replaced), and its python3 is
// that version.
func TestPythonPicksTheServersImageForThatVersion(t *testing.T) {
	tag := randomWord(t)
	buildTestImage(t, "gpud-test/python-3.11:"+tag, map[string]string{"usr/local/bin/python3": "#!/bin/sh\necho Python 3.11.99-fake\n"})
	ts := startContainerServer(t, Options{PythonImage: "gpud-test/python-{python}:" + tag})
	run, out := ts.runOutput("py", task("py", "python: \"3.11\"\n", "python3 --version"), "done")
	if !slices.Contains(out, "Python 3.11.99-fake") {
		t.Fatalf("output %q, want the Python of the image for 3.11", out)
	}
	if img := containerImage(t, run); img != "gpud-test/python-3.11:"+tag {
		t.Fatalf("the job ran in %s", img)
	}
}

// nvcc on Docker: a run without an image gets the server's devel image
// (--nvcc-image), which has the CUDA compiler, or with python the devel
// variant of the Python image ({devel} in --python-image); a Python image
// without one refuses nvcc with python by name.
func TestNvccPicksTheServersDevelImage(t *testing.T) {
	tag := randomWord(t)
	buildTestImage(t, "gpud-test/devel:"+tag, map[string]string{"usr/local/bin/nvcc": "#!/bin/sh\necho nvcc-from-the-devel-image\n"})
	buildTestImage(t, "gpud-test/python-3.11:"+tag+"-devel", map[string]string{"usr/local/bin/nvcc": "#!/bin/sh\necho nvcc-beside-python-3.11\n"})
	ts := startContainerServer(t, Options{NvccImage: "gpud-test/devel:" + tag, PythonImage: "gpud-test/python-{python}:" + tag + "{devel}"})
	_, out := ts.runOutput("devel", task("devel", "nvcc: true\n", "nvcc --version"), "done")
	if !slices.Contains(out, "nvcc-from-the-devel-image") {
		t.Fatalf("output %q, want the devel image's nvcc", out)
	}
	_, out = ts.runOutput("devel-py", task("devel-py", "nvcc: true\npython: \"3.11\"\n", "nvcc --version"), "done")
	if !slices.Contains(out, "nvcc-beside-python-3.11") {
		t.Fatalf("output %q, want the nvcc of the Python 3.11 image's devel variant", out)
	}
	ts = startContainerServer(t, Options{PythonImage: "gpud-test/python-{python}:" + tag})
	ts.refusedAt(task("devel-py", "nvcc: true\npython: \"3.11\"\n", "true"), "nvcc", "{devel}")
}

// containerImage is the image the run's first job's container was made of.
func containerImage(t *testing.T, run api.Run) string {
	t.Helper()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ins, err := cli.ContainerInspect(context.Background(), "gpud-"+run.Jobs[0].ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("the job ran in no container: %v", err)
	}
	return ins.Container.Config.Image
}

// fullCaps is CapEff of a privileged container: every capability the
// kernel has (a default container has about 14 of them).
func fullCaps(line string) bool {
	f := strings.Fields(line)
	return len(f) == 2 && f[0] == "CapEff:" && strings.HasSuffix(f[1], "ffffffff")
}

// engineRefusedPrivileged reports whether a privileged run failed because
// this Docker engine (a sandbox without CAP_SETPCAP and friends) cannot
// grant every capability: runc's "unable to apply caps" comes only from
// the full capability set of a privileged container (ordinary containers
// start on the same engine in every other test), so it is the engine's
// own evidence that gpud asked for a privileged one, the part gpud
// controls. What the job would see cannot be read from inside then.
func engineRefusedPrivileged(t *testing.T, run api.Run) bool {
	t.Helper()
	if run.Status != "failed" || !strings.Contains(run.Reason, "apply caps") {
		return false
	}
	t.Logf("this Docker engine cannot start privileged containers (%s): the request reached it privileged; the capabilities cannot be read from inside here", run.Reason)
	return true
}

// privileged runs only where the host's admin allows it: on a server
// without --allow-privileged the plan refuses it by name; with it, the
// job's container has every capability.
func TestPrivilegedRunsOnlyWhereTheHostsAdminAllowsIt(t *testing.T) {
	ts := startContainerServer(t, Options{})
	ts.refusedAt(task("priv", "privileged: true\n", "true"), "privileged", "--allow-privileged")
	ts = startContainerServer(t, Options{AllowPrivileged: true})
	run, out := ts.runOutput("priv", task("priv", "privileged: true\n", "grep CapEff /proc/self/status"), "")
	if engineRefusedPrivileged(t, run) {
		return
	}
	if run.Status != "done" || len(out) != 1 || !fullCaps(out[0]) {
		t.Fatalf("run %s (%s), output %q; want every capability", run.Status, run.Reason, out)
	}
}

// docker: true runs in the server's Docker-in-Docker image (--dind-image),
// privileged, starting its engine first (start-dockerd, as dstack does);
// it is refused, naming docker, where privileged jobs are not allowed.
func TestDockerInDockerRunsPrivilegedInTheServersDindImage(t *testing.T) {
	ref := "gpud-test/dind:" + randomWord(t)
	buildTestImage(t, ref, map[string]string{"usr/local/bin/start-dockerd": "#!/bin/sh\necho dockerd-started\n"})
	ts := startContainerServer(t, Options{DindImage: ref})
	ts.refusedAt(task("dind", "docker: true\n", "true"), "docker", "--allow-privileged")
	ts = startContainerServer(t, Options{DindImage: ref, AllowPrivileged: true})
	run, out := ts.runOutput("dind", task("dind", "docker: true\n", "grep CapEff /proc/self/status"), "")
	if engineRefusedPrivileged(t, run) {
		return
	}
	if run.Status != "done" || len(out) != 2 || out[0] != "dockerd-started" || !fullCaps(out[1]) {
		t.Fatalf("run %s (%s), output %q; want dockerd started, then every capability", run.Status, run.Reason, out)
	}
	if img := containerImage(t, run); img != ref {
		t.Fatalf("the job ran in %s, want the dind image", img)
	}
}

// python on the process runtime: the job's python and python3 are the
// host's interpreter of that version (its agent reports which it has); a
// version the host lacks is refused at plan time.
func TestPythonOnTheProcessRuntimeIsTheHostsInterpreter(t *testing.T) {
	ts := startServer(t, "")
	hosts := ts.candidateHosts("main")
	if len(hosts) != 1 || len(hosts[0].info.Pythons) == 0 {
		t.Fatalf("the local agent reports no python3.X on PATH (%+v): this test needs one, like Debian's python3.11", hosts)
	}
	have := hosts[0].info.Pythons
	v := have[len(have)-1]
	_, out := ts.runOutput("py", task("py", "python: \""+v+"\"\n", "python --version", "python3 --version"), "done")
	if len(out) != 2 || !strings.HasPrefix(out[0], "Python "+v+".") || !strings.HasPrefix(out[1], "Python "+v+".") {
		t.Fatalf("output %q, want python and python3 to be Python %s", out, v)
	}
	for _, missing := range []string{"3.9", "3.10", "3.11", "3.12", "3.13"} {
		if !slices.Contains(have, missing) {
			ts.refusedAt(task("py-missing", "python: \""+missing+"\"\n", "true"), "python", "python"+missing)
			break
		}
	}
}

// working_dir on the process runtime: a relative one is made inside the
// job's own fresh directory, and the job starts there; an absolute one is
// refused, as are the fields only a container has.
func TestProcessJobsWorkingDirIsMadeInsideTheirOwnDirectory(t *testing.T) {
	ts := startServer(t, "")
	_, out := ts.runOutput("rel", task("rel", "working_dir: sub/dir\n", "pwd"), "done")
	serverCwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 || !strings.HasSuffix(out[0], "/sub/dir") || strings.HasPrefix(out[0], serverCwd) || strings.HasPrefix(out[0], ts.opts.DataDir) {
		t.Fatalf("output %q: want a fresh directory's sub/dir, not under %s or %s", out, serverCwd, ts.opts.DataDir)
	}
	if !strings.Contains(out[0], "/gpud-work-") {
		t.Fatalf("pwd %s is not inside the process runtime's work root (/var/tmp/gpud-work-...)", out[0])
	}
	for field, extra := range map[string]string{
		"working_dir":        "working_dir: /srv\n",
		"user":               "user: nobody\n",
		"entrypoint":         "entrypoint: /bin/true\n",
		"resources.shm_size": smallResources + "  shm_size: 64MB\n",
		"nvcc":               "nvcc: true\n",
		"privileged":         "privileged: true\n",
		"docker":             "docker: true\n",
	} {
		ts.refusedAt(task("refused", extra, "true"), field)
	}
}

// A registered host runs privileged jobs only when its admin started
// `gpud agent --allow-privileged`: the agent reports it, a run that sets
// privileged is refused while no host it may use allows it, and planned
// (and sent to the host's Docker, privileged) once one does. (Which hosts
// of a mixed fleet take it is placement's; here each fleet has one host.)
func TestRegisteredHostsRunPrivilegedJobsOnlyWithAllowPrivileged(t *testing.T) {
	bin := staticGpud(t)
	if err := dockerimage.Build(context.Background(), mustDocker(t)); err != nil {
		t.Fatal(err)
	}
	ts := startServerWith(t, Options{Runtime: "process", RegistrationListen: "127.0.0.1:0"})
	ca := filepath.Join(ts.opts.DataDir, RegistrationCAFile)
	register := func(fleet string, args ...string) {
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply",
			api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: " + fleet + "\nnodes: 0..4\n"}, nil)
		var tok api.RegistrationToken
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/fleets/"+fleet+"/tokens", nil, &tok)
		_, out := testutil.RegisteringAgent{Bin: bin, URL: ts.RegistrationURL(), Token: tok.Token, CA: ca, FakeGPUs: "1xA100:40GB",
			Hostname: fleet + "-host", Args: append([]string{"--runtime", "docker", "--agent-id", fleet + "-" + randomWord(t)}, args...)}.Start(t)
		testutil.Eventually(t, 60*time.Second, func() error {
			for _, h := range ts.candidateHosts("main") {
				if h.fleetName == fleet {
					return nil
				}
			}
			return fmt.Errorf("the %s host has not registered; its output:\n%s", fleet, out)
		})
	}
	priv := func(fleet string) string {
		return task("priv-"+fleet, "image: "+dockerimage.Ref+"\nprivileged: true\nfleets: ["+fleet+"]\n", "grep CapEff /proc/self/status")
	}
	register("closed")
	ts.refusedAt(priv("closed"), "privileged", "gpud agent --allow-privileged")
	register("open", "--allow-privileged")
	// A run that names no fleet goes only where privileged is allowed:
	// the scheduler matches the hosts' opt-in, not just the plan.
	run, _ := ts.runOutput("priv-any", task("priv-any", "image: "+dockerimage.Ref+"\nprivileged: true\n", "true"), "")
	if len(run.Jobs) != 1 || !strings.Contains(run.Jobs[0].Instance, "open") {
		t.Errorf("a privileged run without fleets went to %+v, want the host of fleet open", run.Jobs)
	}
	run, out := ts.runOutput("priv-open", priv("open"), "")
	if engineRefusedPrivileged(t, run) {
		return
	}
	if run.Status != "done" || len(out) != 1 || !fullCaps(out[0]) {
		t.Fatalf("run %s (%s), output %q; want every capability", run.Status, run.Reason, out)
	}
}

// mustDocker is a Docker client closed when the test ends.
func mustDocker(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
