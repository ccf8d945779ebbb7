package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/internal/upload"
)

// uploadStandIns makes an empty file or directory for each local path the
// run's repos and files name, packs and uploads them as gpud run does,
// and returns the archive's SHA-256 ("" when there is nothing to send).
// Paths under ~ are made in a stand-in home (HOME is set for the test).
func uploadStandIns(t *testing.T, ts *testServer, run *api.RunSpec) (string, error) {
	base := t.TempDir()
	// A local path under ~ (dstack's ~/.ssh/id_rsa) is the client's home:
	// a stand-in home here.
	t.Setenv("HOME", filepath.Join(base, "home"))
	make := func(p string, dir bool) {
		full := filepath.Join(base, "work", filepath.FromSlash(p))
		if rest, ok := strings.CutPrefix(p, "~/"); ok {
			full = filepath.Join(base, "home", filepath.FromSlash(rest))
		}
		if !strings.HasPrefix(full, base+string(filepath.Separator)) {
			return // a path that climbs out stays missing: the packer says so
		}
		if dir {
			_ = os.MkdirAll(full, 0o755)
			return
		}
		_ = os.MkdirAll(filepath.Dir(full), 0o755)
		_ = os.WriteFile(full, nil, 0o644)
	}
	for _, r := range run.Repos {
		if r.LocalPath != "" {
			make(r.LocalPath, true)
		}
	}
	for _, f := range run.Files {
		make(f.LocalPath, strings.HasSuffix(f.LocalPath, "/"))
	}
	cl, err := api.NewClient(ts.URL(), ts.admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	return upload.Send(context.Background(), cl, "main", run, filepath.Join(base, "work"), 0, nil)
}

// secretRef finds the secrets a configuration refers to.
var secretRef = regexp.MustCompile(`\$\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// TestDstackExamplesArePlannedHonestlyOrRefusedByField plans each of the
// dstack compatibility corpus's runs on a server with a fake 8×H100 host
// (fleets, queues, volumes and gateways go through the rules of their
// apply, without provisioning anything): each is planned — every field it
// sets has a rule that honours it there — or refused with one error per
// field, each naming the field's path and line. Nothing else is allowed:
// no field without a rule, no other error.
func TestDstackExamplesArePlannedHonestlyOrRefusedByField(t *testing.T) {
	dir := testutil.DstackExamples(t, repoRoot)
	files, err := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	if err != nil {
		t.Fatal(err)
	}
	// The server's own host runs jobs in Docker (gpud serve's default).
	ts := startServerWith(t, Options{FakeGPUs: "8xH100:80GB"})
	// The corpus's secrets exist in the project, with dummy values.
	secrets := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range secretRef.FindAllStringSubmatch(string(b), -1) {
			secrets[m[1]] = true
		}
	}
	for name := range secrets {
		ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/secrets/"+name, api.SetSecretRequest{Value: "x"}, nil)
	}
	planned, refused := map[api.Kind]int{}, map[string]int{}
	malformed := 0
	for _, f := range files {
		name := filepath.Base(f)
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := api.Parse(name, src)
		if err != nil {
			malformed++ // api's corpus test pins which ones, and why
			continue
		}
		var errs []string
		if cfg.Run() != nil {
			req := api.ApplyRunRequest{ApplyRequest: api.ApplyRequest{ConfigurationYAML: string(src), Filename: name},
				Env: api.ClientEnv(cfg, src, func(string) (string, bool) { return "x", true })}
			// As gpud run does: the local paths repos and files name are
			// packed and uploaded first (stand-ins here: the corpus holds
			// the configurations, not their working trees).
			if req.Upload, err = uploadStandIns(t, ts, cfg.Run()); err != nil {
				t.Logf("%s: gpud run would refuse it before planning: %v", name, err)
				refused["(client) repos/files"]++
				continue
			}
			var plan api.RunPlan
			status, se := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/plan", req, &plan)
			switch {
			case status == http.StatusOK:
			case status == http.StatusUnprocessableEntity && se.Code == api.CodeNotHonoured:
				errs = se.Errors
			default:
				t.Errorf("%s: the plan answered %d %s: %s", name, status, se.Code, se.Error())
				continue
			}
		} else {
			for _, e := range checkKindFields(cfg) {
				errs = append(errs, e.Error())
			}
		}
		if len(errs) == 0 {
			planned[cfg.Kind]++
			continue
		}
		for _, e := range errs {
			// "file:line:col: path: not honoured ... — instead"
			rest, ok := strings.CutPrefix(e, name+":")
			path, _, _ := strings.Cut(strings.SplitN(rest, ": ", 2)[1], ":")
			if !ok || strings.Contains(e, "has no rule") || !strings.Contains(e, "not honoured") || !strings.Contains(e, " — ") {
				t.Errorf("%s: a refusal that does not name a field, its line and what to do instead: %q", name, e)
				continue
			}
			refused[api.StripIndex(path)]++
			if testing.Verbose() {
				t.Logf("%s: %s", name, e)
			}
		}
	}
	if len(files)-malformed < 170 {
		t.Fatalf("only %d configurations of %s parse; the corpus has 175", len(files)-malformed, dir)
	}
	var fields []string
	for p, n := range refused {
		fields = append(fields, fmt.Sprintf("%s %d", p, n))
	}
	sort.Strings(fields)
	t.Logf("planned or applied with every field honoured: %v; refusals by field: %s", planned, strings.Join(fields, ", "))
}
