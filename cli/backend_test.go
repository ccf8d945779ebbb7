package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/daemon"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/plugins"
)

// buildPlugin builds the test plugin (plugins/internal/testplugin, a main
// package of its own, as a third party's plugin) into dir as
// gpud-backend-<typ>, with link flags ldflags.
func buildPlugin(t *testing.T, dir, typ, ldflags string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", filepath.Join(dir, "gpud-backend-"+typ), "gpud.dev/gpud/plugins/internal/testplugin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the test plugin: %v\n%s", err, out)
	}
}

// TestBackendPluginsThroughTheCLI: an external plugin built from its own
// main package is discovered in the plugin directory; `gpud backend add`
// checks a configuration through it (a wrong kubeconfig is refused, naming
// the field, and what was stored stays), `gpud backend list` shows it with
// its protocol, version and state but never its credentials, `gpud offer`
// lists its offers after the hosts', cheapest first and grouped; killed,
// its plugin is restarted and its gangs re-read; a plugin of another
// protocol version is refused naming both versions.
func TestBackendPluginsThroughTheCLI(t *testing.T) {
	plugDir := t.TempDir()
	if err := os.Chmod(plugDir, 0o755); err != nil {
		t.Fatal(err)
	}
	buildPlugin(t, plugDir, "test", "")
	buildPlugin(t, plugDir, "old", "-X main.protocol=2")
	srv := serveForCLI(t, daemon.Options{FakeGPUs: "1xH100:80GB", Runtime: "process", PluginDir: plugDir})

	work := t.TempDir()
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("lab.yml", fmt.Sprintf("type: test\nname: lab\nkubeconfig: %s\nstate_dir: %s\ntoken: s3cret-token\n", kubeconfig, filepath.Join(work, "engine")))
	wrong := write("wrong.yml", fmt.Sprintf("type: test\nname: lab\nkubeconfig: %s\nstate_dir: %s\n", filepath.Join(work, "missing"), work))
	old := write("old.yml", fmt.Sprintf("type: old\nkubeconfig: %s\nstate_dir: %s\n", kubeconfig, work))

	_, stderr, code := runCLI("backend", "add", wrong)
	if code == 0 || !strings.Contains(stderr, "kubeconfig: open "+filepath.Join(work, "missing")) {
		t.Fatalf("backend add with a missing kubeconfig: exit %d: %s", code, stderr)
	}
	if out := mustRunCLI(t, "backend", "list"); !strings.Contains(out, "no backends") {
		t.Fatalf("a refused backend was stored: %s", out)
	}
	mustRunCLI(t, "backend", "add", good)
	// A bad configuration for a stored backend is refused; the stored one stays.
	if _, stderr, code := runCLI("backend", "add", wrong); code == 0 || !strings.Contains(stderr, "kubeconfig") {
		t.Fatalf("replacing lab with a bad configuration: exit %d: %s", code, stderr)
	}
	_, stderr, code = runCLI("backend", "add", old)
	for _, want := range []string{"gpud-backend-old", "protocol version 2", "speaks version 1"} {
		if code == 0 || !strings.Contains(stderr, want) {
			t.Errorf("backend add of a protocol 2 plugin: exit %d: %s; want it to say %q", code, stderr, want)
		}
	}

	list := func() api.Backend {
		t.Helper()
		out := mustRunCLI(t, "backend", "list", "--json")
		if strings.Contains(out, "s3cret") || strings.Contains(out, kubeconfig) {
			t.Fatalf("backend list shows the configuration: %s", out)
		}
		var bs []api.Backend
		if err := json.Unmarshal([]byte(out), &bs); err != nil || len(bs) != 1 {
			t.Fatalf("backend list: %s %v", out, err)
		}
		return bs[0]
	}
	b := list()
	if b.Name != "lab" || b.Type != "test" || !b.External || b.Plugin != filepath.Join(plugDir, "gpud-backend-test") ||
		b.Protocol != plugins.ProtocolVersion || b.PluginVersion != "0.1.0-test" || b.State != "running" || b.Source != "api" {
		t.Fatalf("backend: %+v", b)
	}
	table := mustRunCLI(t, "backend", "list")
	for _, want := range []string{"lab", "test", "external", "0.1.0-test", "running"} {
		if !strings.Contains(table, want) {
			t.Errorf("backend list lacks %q:\n%s", want, table)
		}
	}

	var offers []api.Offer
	if err := json.Unmarshal([]byte(mustRunCLI(t, "offer", "--json")), &offers); err != nil || len(offers) != 3 {
		t.Fatalf("offers: %+v %v", offers, err)
	}
	if offers[0].Backend == "lab" || offers[1].Backend != "lab" || offers[1].Price != 0.5 || !offers[1].Spot ||
		offers[2].Price != 12 || offers[2].Region != "test-1" {
		t.Fatalf("offers, want the host's then lab's cheapest first: %+v", offers)
	}
	if _, stderr, code := runCLI("offer", "--group-by", "gpu,zone"); code != exitUsage || !strings.Contains(stderr, `"zone"`) {
		t.Errorf("offer --group-by zone: exit %d %s", code, stderr)
	}
	grouped := mustRunCLI(t, "offer", "--group-by", "gpu,backend,region")
	for _, want := range []string{"GPU", "BACKEND", "REGION", "8×A100", "lab", "test-1", "$12"} {
		if !strings.Contains(grouped, want) {
			t.Errorf("offer --group-by lacks %q:\n%s", want, grouped)
		}
	}

	// A gang runs on the backend; its plugin is killed; the server restarts
	// it and re-reads the gang.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lab := srv.Backends("main")["lab"]
	if err := lab.StartGang(ctx, plugins.Gang{ID: "run1", Project: "main", Jobs: []api.JobSpec{{ID: "run1-0"}}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(b.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, func() error {
		if b := list(); b.State != "running" || b.Restarts != 1 || b.Gangs != 1 || b.Pid == 0 || !strings.Contains(b.LastError, "exited") {
			return fmt.Errorf("after the kill: %+v", b)
		}
		return nil
	})
	if gangs := srv.BackendGangs("main", "lab"); len(gangs["run1"]) != 1 {
		t.Fatalf("gangs re-read after the restart: %+v", gangs)
	}
	if table := mustRunCLI(t, "backend", "list"); !strings.Contains(table, "exited") {
		t.Errorf("backend list does not say why the plugin restarted:\n%s", table)
	}

	// Deleting a backend that runs gangs is refused; once they stop, it goes.
	if _, stderr, code := runCLI("backend", "delete", "lab"); code == 0 || !strings.Contains(stderr, "runs gangs run1") {
		t.Fatalf("delete with a gang: exit %d %s", code, stderr)
	}
	if err := lab.Stop(ctx, "run1", time.Second); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(list().Pid)
	mustRunCLI(t, "backend", "delete", "lab")
	if out := mustRunCLI(t, "backend", "list"); !strings.Contains(out, "no backends") {
		t.Fatalf("after delete: %s", out)
	}
	if _, err := os.Stat("/proc/" + pid); err == nil {
		testutil.Eventually(t, 30*time.Second, func() error {
			if _, err := os.Stat("/proc/" + pid); err == nil {
				return fmt.Errorf("plugin process %s still runs after delete", pid)
			}
			return nil
		})
	}
}

// TestBuiltinPluginHelper is this test binary acting as `gpud plugin serve
// TYPE` when a server starts it as a built-in backend's plugin (go-plugin's
// magic cookie in its environment); run as a test it skips.
func TestBuiltinPluginHelper(t *testing.T) {
	if os.Getenv(plugins.Handshake.MagicCookieKey) == "" {
		t.Skip("runs only as a built-in backend's plugin")
	}
	args := flag.Args()
	if len(args) == 0 {
		t.Fatal("no backend type")
	}
	if err := builtinBackends().Serve(args[len(args)-1]); err != nil {
		t.Fatal(err)
	}
}

// TestBuiltinKubernetesBackendIsCheckedAtAdd: the built-in kubernetes
// backend runs as a subprocess of the server's own binary (here this test
// binary, as `plugin serve kubernetes`); a configuration without a cluster
// or with a kubeconfig that does not exist is refused at `gpud backend
// add`, naming the field, and nothing is stored.
func TestBuiltinKubernetesBackendIsCheckedAtAdd(t *testing.T) {
	serveForCLI(t, daemon.Options{NoLocalAgent: true, BuiltinBackends: builtinBackends().Names(),
		PluginCommand: []string{os.Args[0], "-test.run=^TestBuiltinPluginHelper$", "--"}})
	work := t.TempDir()
	for name, body := range map[string]string{
		"none.yml":    "type: kubernetes\n",
		"missing.yml": "type: kubernetes\nkubeconfig: " + filepath.Join(work, "missing") + "\n",
		"typo.yml":    "type: kubernetes\nkubeconfg: /etc/kubeconfig\n",
	} {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := runCLI("backend", "add", p)
		if code == 0 || !strings.Contains(stderr, "kubernetes backend") || !strings.Contains(stderr, "kubeconf") {
			t.Errorf("backend add %s: exit %d: %s", name, code, stderr)
		}
	}
	if out := mustRunCLI(t, "backend", "list"); !strings.Contains(out, "no backends") {
		t.Fatalf("a refused backend was stored: %s", out)
	}
}
