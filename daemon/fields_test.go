package daemon

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
)

// repoRoot is the module root, from the daemon package's directory.
const repoRoot = ".."

// testFuncs lists the Test functions of every package of the module, as
// "dir.TestName" with dir relative to the module root ("daemon",
// "sched/scenario").
func testFuncs(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != repoRoot) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir, err := filepath.Rel(repoRoot, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				out[filepath.ToSlash(dir)+"."+fn.Name.Name] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list the module's tests: %v", err)
	}
	return out
}

// TestEveryFieldTakesEffectOrIsRefused is the coverage rule of DESIGN.md
// §12: every field of every kind, found by reflection over the spec types,
// has a rule; an honoured field names end-to-end tests that exist; a
// refused one says why and what to do instead. A field added to api/
// without either fails here.
func TestEveryFieldTakesEffectOrIsRefused(t *testing.T) {
	tests := testFuncs(t)
	used := map[string]bool{}
	for _, k := range api.Kinds() {
		kind := api.Kind(k)
		paths := api.FieldPaths(kind)
		if len(paths) == 0 {
			t.Fatalf("kind %s: reflection found no fields", kind)
		}
		for _, p := range paths {
			r, at, ok := ruleFor(kind, p)
			if !ok {
				t.Errorf("%s field %q has no rule: make it take effect (with an e2e test named in Proof) or refuse it in a daemon/fields_rules_*.go table", kind, p)
				continue
			}
			for _, key := range []string{k + ":" + at, at} {
				if _, ok := rules[key]; ok {
					used[key] = true
					break
				}
			}
			if at == "" {
				used[k+":"] = true
			}
			refused := r.All != nil || len(r.Refuse) > 0 || r.Check != nil
			if r.All == nil && len(r.Proof) == 0 {
				t.Errorf("%s field %q is honoured (on some targets) but names no proof: add the e2e test that shows its effect to Proof", kind, p)
			}
			if !refused && len(r.Proof) == 0 {
				t.Errorf("%s field %q neither takes effect nor is refused", kind, p)
			}
			for _, pr := range r.Proof {
				if !tests[pr] {
					t.Errorf("%s field %q: its proof %s is not a test of this module", kind, p, pr)
				}
			}
			for _, rf := range refusalsOf(r) {
				if rf.Why == "" || rf.Instead == "" {
					t.Errorf("%s field %q: a refusal needs both why and what to do instead: %+v", kind, p, rf)
				}
			}
		}
	}
	for key := range rules {
		if !used[key] {
			t.Errorf("rule %q matches no field of any kind: remove it or fix its path", key)
		}
	}
}

func refusalsOf(r fieldRule) []refusal {
	var out []refusal
	if r.All != nil {
		out = append(out, *r.All)
	}
	for _, rf := range r.Refuse {
		out = append(out, rf)
	}
	return out
}

// refusedSamples set each field refused on every target, in a
// configuration that is otherwise honoured, to prove the refusal reaches
// the plan with the field's path and line.
var refusedSamples = map[string]string{
	"repos.if_exists":                  "type: task\ncommands: [true]\nrepos:\n  - local_path: .\n    if_exists: skip\n",
	"dev-environment:entrypoint":       "type: dev-environment\nentrypoint: /bin/sh\n",
	"resources.gpu.memory_share":       "type: task\ncommands: [true]\nresources:\n  gpu:\n    memory_share: 10GB\n",
	"dev-environment:version":          "type: dev-environment\nversion: 1.2.3\n",
	"task:groups.python":               "type: task\ngroups:\n  - name: a\n    python: \"3.11\"\n    commands: [true]\n",
	"task:groups.ports":                "type: task\ngroups:\n  - name: a\n    ports: [8000]\n    commands: [true]\n",
	"service:replicas.python":          "type: service\nport: 8000\nreplicas:\n  - python: \"3.11\"\n    commands: [true]\n",
	"service:replicas.nvcc":            "type: service\nport: 8000\nreplicas:\n  - nvcc: true\n    commands: [true]\n",
	"service:replicas.docker":          "type: service\nport: 8000\nreplicas:\n  - docker: true\n    commands: [true]\n",
	"service:replicas.scaling":         "type: service\nport: 8000\nreplicas:\n  - count: 1\n    scaling: {target: 1}\n    commands: [true]\n",
	"service:router":                   "type: service\nport: 8000\ncommands: [true]\nrouter: {type: sglang, policy: round_robin}\n",
	"service:replicas.spot_policy":     "type: service\nport: 8000\nreplicas:\n  - spot_policy: on-demand\n    commands: [true]\n",
	"service:replicas.reservation":     "type: service\nport: 8000\nreplicas:\n  - reservation: cr-1\n    commands: [true]\n",
	"service:replicas.privileged":      "type: service\nport: 8000\nreplicas:\n  - privileged: true\n    commands: [true]\n",
	"resources.gpu.total_memory":       "type: task\ncommands: [true]\nresources:\n  gpu:\n    total_memory: 80GB\n",
	"resources.gpu.compute_capability": "type: task\ncommands: [true]\nresources:\n  gpu:\n    compute_capability: \"9.0\"\n",
	"resources.cpu.arch":               "type: task\ncommands: [true]\nresources:\n  cpu: arm:2..\n",
	"resources.disk":                   "type: task\ncommands: [true]\nresources:\n  disk: 1TB..\n",
	"python":                           "type: task\ncommands: [true]\npython: \"3.12\"\n",
	"nvcc":                             "type: task\ncommands: [true]\nnvcc: true\n",
	"docker":                           "type: task\ncommands: [true]\ndocker: true\n",
	"dstack":                           "type: task\ncommands: [true]\ndstack: true\n",
	"user":                             "type: task\ncommands: [true]\nuser: root\n",
	"entrypoint":                       "type: task\ncommands: [true]\nentrypoint: /bin/sh\n",
	"working_dir":                      "type: task\ncommands: [true]\nworking_dir: /w\n",
	"resources.shm_size":               "type: task\ncommands: [true]\nresources:\n  shm_size: 1GB\n",
	"fleets":                           "type: task\ncommands: [true]\nfleets: [nowhere]\n",
	"instances":                        "type: task\ncommands: [true]\ninstances:\n  - name: nowhere\n",
	"backends":                         "type: task\ncommands: [true]\nbackends: [aws]\n",
	"regions":                          "type: task\ncommands: [true]\nregions: [us-east-1]\n",
	"availability_zones":               "type: task\ncommands: [true]\navailability_zones: [us-east-1a]\n",
	"instance_types":                   "type: task\ncommands: [true]\ninstance_types: [p5.48xlarge]\n",
	"reservation":                      "type: task\ncommands: [true]\nreservation: r-1\n",
	"spot_policy":                      "type: task\ncommands: [true]\nspot_policy: spot\n",
	"max_price":                        "type: task\ncommands: [true]\nmax_price: 1.5\n",
	"creation_policy":                  "type: task\ncommands: [true]\ncreation_policy: reuse\n",
	"idle_duration":                    "type: task\ncommands: [true]\nidle_duration: 1h\n",
	"tags":                             "type: task\ncommands: [true]\ntags: {team: ml}\n",

	"fleet:ssh_config.hosts.blocks": "type: fleet\nname: f\nssh_config:\n  user: u\n  identity_file: /k\n  hosts:\n    - hostname: h\n      blocks: 2\n",
	"fleet:blocks":                  "type: fleet\nname: f\nnodes: 0..2\nblocks: 4\n",
	"fleet:resources":               "type: fleet\nname: f\nnodes: 0..2\nresources:\n  gpu: 8\n",
	"fleet:regions":                 "type: fleet\nname: f\nnodes: 0..2\nregions: [us-east-1]\n",
	"fleet:availability_zones":      "type: fleet\nname: f\nnodes: 0..2\navailability_zones: [us-east-1a]\n",
	"fleet:instance_types":          "type: fleet\nname: f\nnodes: 0..2\ninstance_types: [p5.48xlarge]\n",
	"fleet:reservation":             "type: fleet\nname: f\nnodes: 0..2\nreservation: r-1\n",
	"fleet:spot_policy":             "type: fleet\nname: f\nnodes: 0..2\nspot_policy: spot\n",
	"fleet:max_price":               "type: fleet\nname: f\nnodes: 0..2\nmax_price: 2\n",
	"fleet:idle_duration":           "type: fleet\nname: f\nnodes: 0..2\nidle_duration: 1h\n",
	"fleet:retry":                   "type: fleet\nname: f\nnodes: 0..2\nretry: true\n",
	"fleet:tags":                    "type: fleet\nname: f\nnodes: 0..2\ntags: {a: b}\n",
	"fleet:env":                     "type: fleet\nname: f\nnodes: 0..2\nenv: [A=1]\n",
	"gateway:backend":               "type: gateway\nname: g\ndomain: g.example\nbackend: aws\n",
	"gateway:region":                "type: gateway\nname: g\ndomain: g.example\nregion: eu-west-1\n",
	"gateway:instance_type":         "type: gateway\nname: g\ndomain: g.example\ninstance_type: t3.small\n",
	"gateway:tags":                  "type: gateway\nname: g\ndomain: g.example\ntags: {a: b}\n",
	"gateway:router":                "type: gateway\nname: g\ndomain: g.example\nrouter: {type: sglang, policy: round_robin}\n",
	"volume:region":                 "type: volume\nname: v\nbackend: local\nregion: eu-west-1\n",
	"volume:availability_zone":      "type: volume\nname: v\nbackend: local\navailability_zone: eu-west-1a\n",
	"volume:volume_id":              "type: volume\nname: v\nbackend: local\nvolume_id: vol-123\n",
	"volume:claim_name":             "type: volume\nname: v\nbackend: local\nclaim_name: pvc\n",
	"volume:storage_class_name":     "type: volume\nname: v\nbackend: local\nstorage_class_name: fast\n",
	"volume:access_modes":           "type: volume\nname: v\nbackend: local\naccess_modes: [ReadWriteOnce]\n",
	"volume:tags":                   "type: volume\nname: v\nbackend: local\ntags: {a: b}\n",
}

// TestRefusedFieldsAreRefusedByNameAtPlanTime plans, for every field
// refused on every target, a configuration that sets it, and checks the
// server answers 422 not_honoured naming the field and its line.
func TestRefusedFieldsAreRefusedByNameAtPlanTime(t *testing.T) {
	ts := startServer(t, "")
	var missing []string
	for key, r := range rules {
		kind, path, scoped := strings.Cut(key, ":")
		if !scoped {
			kind, path = "", key
		}
		if r.All == nil || path == "" {
			continue // kinds refused whole have no endpoint
		}
		sample, ok := refusedSamples[key]
		if !ok {
			missing = append(missing, key)
			continue
		}
		if kind != "" && !strings.HasPrefix(sample, "type: "+kind+"\n") {
			t.Errorf("%s: the sample is not a %s", key, kind)
		}
		endpoint, body := "/api/v1/projects/main/runs/plan", any(api.ApplyRunRequest{ApplyRequest: api.ApplyRequest{ConfigurationYAML: sample, Filename: "sample.yml"}})
		if kind == "fleet" {
			endpoint, body = "/api/v1/projects/main/fleets/apply", api.ApplyRequest{ConfigurationYAML: sample, Filename: "sample.yml"}
		}
		if kind == "gateway" {
			endpoint, body = "/api/v1/projects/main/gateways/apply", api.ApplyRequest{ConfigurationYAML: sample, Filename: "sample.yml"}
		}
		if kind == "volume" {
			endpoint, body = "/api/v1/projects/main/volumes/apply", api.ApplyRequest{ConfigurationYAML: sample, Filename: "sample.yml"}
		}
		status, se := ts.call(ts.admin, "POST", endpoint, body, nil)
		if status != 422 || se.Code != api.CodeNotHonoured {
			t.Errorf("%s: %d %q (%s), want 422 %q", key, status, se.Code, se.Message, api.CodeNotHonoured)
			continue
		}
		found := false
		for _, e := range se.Errors {
			if strings.Contains(api.StripIndex(e), ": "+path+": ") && strings.HasPrefix(e, "sample.yml:") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: the refusal does not name the field with its file and line: %q", key, se.Errors)
		}
	}
	// Another kind posted as a run is a plain 400, never a crash.
	for _, other := range []string{"type: fleet\nname: f\nnodes: 0..1\n", "type: gateway\nname: g\nbackend: aws\nregion: r\ndomain: d.example\n", "type: queue\nname: q\n"} {
		if status, se := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(other), nil); status != 400 {
			t.Errorf("plan of %q: %d %s, want 400", other, status, se.Error())
		}
	}
	slices.Sort(missing)
	for _, k := range missing {
		t.Errorf("field %s is refused on every target but has no sample in refusedSamples to prove the refusal reaches the plan", k)
	}
}

// TestFieldTableInDocsIsCurrent keeps docs/config.md's field table equal
// to the rules; GPUD_UPDATE_DOCS=1 rewrites it.
func TestFieldTableInDocsIsCurrent(t *testing.T) {
	const doc = repoRoot + "/docs/config.md"
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start, end := strings.Index(text, fieldTableBegin), strings.Index(text, fieldTableEnd)
	want := fieldTable()
	if start < 0 || end < start {
		t.Fatalf("%s has no %q ... %q markers for the field table", doc, fieldTableBegin, fieldTableEnd)
	}
	got := text[start : end+len(fieldTableEnd)]
	if got == want {
		return
	}
	if os.Getenv("GPUD_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(doc, []byte(text[:start]+want+text[end+len(fieldTableEnd):]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's field table is out of date with the rules: run GPUD_UPDATE_DOCS=1 go test ./daemon -run TestFieldTableInDocsIsCurrent", doc)
}
