package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/store"
)

// backendFixture is a plugin directory with the test plugin (its own main
// package, built by the test) and a valid kubeconfig for it.
type backendFixture struct {
	pluginDir, work, kubeconfig string
}

func newBackendFixture(t testing.TB) backendFixture {
	t.Helper()
	f := backendFixture{pluginDir: t.TempDir(), work: t.TempDir()}
	if err := os.Chmod(f.pluginDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(f.pluginDir, "gpud-backend-test"), "gpud.dev/gpud/plugins/internal/testplugin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the test plugin: %v\n%s", err, out)
	}
	f.kubeconfig = filepath.Join(f.work, "kubeconfig")
	if err := os.WriteFile(f.kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// config is the test backend's configuration with a token and a region.
func (f backendFixture) config(token, region string) json.RawMessage {
	b, err := json.Marshal(map[string]string{"kubeconfig": f.kubeconfig, "state_dir": filepath.Join(f.work, region), "token": token, "region": region})
	if err != nil {
		panic(err)
	}
	return b
}

// TestBackendsBelongToTheirProjectAndNeverShowCredentials attacks the
// backends API: a project's manager cannot add or delete one, its admin
// cannot name a file of the server's host or its in-cluster identity in a
// configuration (the plugin would read it as the server); another
// project's admin sees none of main's, cannot delete it by name, and adding
// one of the same name in its own project touches nothing of main's; the
// token in a configuration is in no answer, event, log line, nor in the
// state file's bytes (sealed).
func TestBackendsBelongToTheirProjectAndNeverShowCredentials(t *testing.T) {
	fx := newBackendFixture(t)
	logs := &lockedBuffer{}
	ts := startServerWith(t, Options{FakeGPUs: "1xH100:80GB", Runtime: "process", PluginDir: fx.pluginDir,
		Logger: zerolog.New(logs).Level(zerolog.DebugLevel)})
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	tok := map[string]string{}
	for _, u := range []string{"outsider", "usr", "padmin"} {
		tok[u] = ts.user(u)
	}
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/other/members/outsider", api.SetMemberRequest{Role: "admin"}, nil)
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/members/usr", api.SetMemberRequest{Role: "manager"}, nil)
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/members/padmin", api.SetMemberRequest{Role: "admin"}, nil)

	const secret = "s3cret-main-token"
	add := api.AddBackendRequest{Name: "lab", Type: "test", Config: fx.config(secret, "main-1")}
	if code, se := ts.call(tok["usr"], "POST", "/api/v1/projects/main/backends", add, nil); code != http.StatusForbidden {
		t.Fatalf("a manager adds a backend: %d %+v", code, se)
	}
	if code, se := ts.call(tok["padmin"], "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Type: "nope"}, nil); code != http.StatusBadRequest || se.Field != "type" || !strings.Contains(se.Message, "unknown backend type") {
		t.Fatalf("an unknown type: %d %+v", code, se)
	}
	// A project admin may not make the server read its own files nor use
	// its in-cluster identity; a global admin adds the backend.
	for _, cfg := range []string{`{"kubeconfig":"` + fx.kubeconfig + `"}`, `{"kai":{"x":"~/.kube/config"}}`, `{"in_cluster":true}`} {
		code, se := ts.call(tok["padmin"], "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "lab", Type: "test", Config: json.RawMessage(cfg)}, nil)
		if code != http.StatusBadRequest || !strings.Contains(se.Message, "global admin") {
			t.Fatalf("a project admin adds %s: %d %+v", cfg, code, se)
		}
	}
	var added api.Backend
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/backends", add, &added)
	if added.State != "running" || added.Type != "test" {
		t.Fatalf("added: %+v", added)
	}
	if code, _ := ts.call(tok["outsider"], "GET", "/api/v1/projects/main/backends", nil, nil); code != http.StatusNotFound {
		t.Fatalf("another project's admin lists main's backends: %d", code)
	}
	if code, _ := ts.call(tok["outsider"], "DELETE", "/api/v1/projects/other/backends/lab", nil, nil); code != http.StatusNotFound {
		t.Fatalf("another project's admin deletes lab through its own project: %d", code)
	}
	var theirs []api.Backend
	ts.must(http.StatusOK, tok["outsider"], "GET", "/api/v1/projects/other/backends", nil, &theirs)
	if len(theirs) != 0 {
		t.Fatalf("other lists %+v", theirs)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/other/backends",
		api.AddBackendRequest{Name: "lab", Type: "test", Config: fx.config("other-token", "other-1")}, nil)
	if code, _ := ts.call(tok["usr"], "DELETE", "/api/v1/projects/main/backends/lab", nil, nil); code != http.StatusForbidden {
		t.Fatalf("a manager deletes a backend: %d", code)
	}
	var offers []api.Offer
	ts.must(http.StatusOK, tok["usr"], "GET", "/api/v1/projects/main/offers", nil, &offers)
	regions := map[string]bool{}
	for _, o := range offers {
		if o.Backend == "lab" {
			regions[o.Region] = true
		}
	}
	if !regions["main-1"] || regions["other-1"] {
		t.Fatalf("main's offers come from %v, want main's lab only: %+v", regions, offers)
	}
	b, ok := ts.Backends("main")["lab"]
	if !ok || len(ts.Backends("main")) != 1 {
		t.Fatalf("Backends(main): %v", ts.Backends("main"))
	}
	if err := b.Check(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The token is nowhere it could be read back.
	for _, path := range []string{"/api/v1/projects/main/backends", "/api/v1/projects/main/events", "/api/v1/projects/other/events"} {
		req, err := http.NewRequest("GET", ts.URL()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+ts.admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		_, err = body.ReadFrom(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || strings.Contains(body.String(), secret) || strings.Contains(body.String(), fx.kubeconfig) {
			t.Errorf("GET %s: %d %v: %s", path, resp.StatusCode, err, body.String())
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the server's log holds the token")
	}
	if !strings.Contains(logs.String(), "test backend configured") {
		t.Errorf("the plugin's own log line is not in the server's log")
	}
	state, err := os.ReadFile(filepath.Join(ts.opts.DataDir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(state, []byte(secret)) {
		t.Errorf("the state file holds the token in the clear")
	}
	ts.must(http.StatusNoContent, tok["padmin"], "DELETE", "/api/v1/projects/main/backends/lab", nil, nil)
	ts.must(http.StatusOK, tok["outsider"], "GET", "/api/v1/projects/other/backends", nil, &theirs)
	if len(theirs) != 1 || theirs[0].State != "running" {
		t.Fatalf("deleting main's lab touched other's: %+v", theirs)
	}
}

// TestServerConfigFileBackends: the backends of --config FILE are checked
// and stored at start (source config; the API refuses to delete them), and
// one with a wrong kubeconfig fails the start naming the file, the entry
// and the field.
func TestServerConfigFileBackends(t *testing.T) {
	fx := newBackendFixture(t)
	write := func(kubeconfig string) string {
		p := filepath.Join(fx.work, "config.yml")
		body := fmt.Sprintf("projects:\n  - name: main\n    backends:\n      - type: test\n        name: lab\n        kubeconfig: %s\n        state_dir: %s\n        token: t0k\n", kubeconfig, fx.work)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, err := New(context.Background(), Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", NoLocalAgent: true, PluginDir: fx.pluginDir,
		ConfigFile: write(filepath.Join(fx.work, "missing"))})
	if err == nil || !strings.Contains(err.Error(), "projects[0].backends[0]") || !strings.Contains(err.Error(), "kubeconfig: open") {
		t.Fatalf("start with a wrong kubeconfig: %v", err)
	}
	ts := startServerWith(t, Options{NoLocalAgent: true, PluginDir: fx.pluginDir, ConfigFile: write(fx.kubeconfig)})
	var bs []api.Backend
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/backends", nil, &bs)
	if len(bs) != 1 || bs[0].Name != "lab" || bs[0].Source != "config" || bs[0].State != "running" {
		t.Fatalf("backends: %+v", bs)
	}
	if code, se := ts.call(ts.admin, "DELETE", "/api/v1/projects/main/backends/lab", nil, nil); code != http.StatusConflict || !strings.Contains(se.Message, "configuration file") {
		t.Fatalf("delete a configured backend: %d %+v", code, se)
	}
}

// TestBackendsComeBackAfterAServerRestart: a backend added through the API
// is started again by the next server on the same state (its sealed
// configuration read back), which re-reads the gangs the engine runs.
// The plugins themselves are not reattached: the first server shut them
// down, and the gangs live in the engine.
func TestBackendsComeBackAfterAServerRestart(t *testing.T) {
	fx := newBackendFixture(t)
	dir := t.TempDir()
	ts := startServerWith(t, Options{DataDir: dir, NoLocalAgent: true, PluginDir: fx.pluginDir})
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "lab", Type: "test", Config: fx.config("t0k", "r1")}, nil)
	gang := plugins.Gang{ID: "run9", Project: "main", Jobs: []api.JobSpec{{ID: "run9-0"}, {ID: "run9-1"}}}
	if err := ts.Backends("main")["lab"].StartGang(context.Background(), gang); err != nil {
		t.Fatal(err)
	}
	first := ts.backendOut(mustRecord(t, ts, "main/lab")).Pid
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/cmdline", first)); err == nil {
		t.Fatalf("plugin process %d outlived its server", first)
	}
	ts2 := startServerWith(t, Options{DataDir: dir, NoLocalAgent: true, PluginDir: fx.pluginDir})
	var bs []api.Backend
	ts2.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/backends", nil, &bs)
	if len(bs) != 1 || bs[0].State != "running" || bs[0].Gangs != 1 || bs[0].Pid == first {
		t.Fatalf("after the restart: %+v", bs)
	}
	if jobs := ts2.BackendGangs("main", "lab")["run9"]; len(jobs) != 2 {
		t.Fatalf("gang re-read: %+v", jobs)
	}
}

func mustRecord(t *testing.T, ts *testServer, id string) store.Record {
	t.Helper()
	rec, err := ts.store.Backends().Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
