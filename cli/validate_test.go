package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
)

func TestValidateExitCodesAndOutput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yml")
	writeTestFile(t, bad, "type: task\ncommands: [x]\nresources:\n  gpu: H100:x\n")
	testCLICases(t, []cliCase{
		{name: "valid file prints the normalized spec", args: []string{"validate", "../testdata/hello.yml"}, code: 0,
			stdout: "# ../testdata/hello.yml: valid task \"hello\"\ntype: task\nname: hello"},
		{name: "invalid file exits 1 with position, caret and fix", args: []string{"validate", bad}, code: exitInvalidInput,
			stderr: bad + ":4:8: resources.gpu: \"H100:x\" — count must be a number or range like 2 or 1..8\n      gpu: H100:x\n           ^"},
		{name: "every file is checked even after an invalid one", args: []string{"validate", bad, "../testdata/hello.yml"}, code: exitInvalidInput,
			stdout: "valid task \"hello\"", stderr: "1 of 2 files are invalid"},
		{name: "missing file is invalid input", args: []string{"validate", "../testdata/no-such.yml"}, code: exitInvalidInput, stderr: "no such file"},
		{name: "no file is a usage error", args: []string{"validate"}, code: exitUsage, stderr: "give at least one configuration file"},
		{name: "unknown flag is a usage error", args: []string{"validate", "--jsn", "../testdata/hello.yml"}, code: exitUsage},
		{name: "unknown profile is a usage error", args: []string{"validate", "--profile", "nope", "../testdata/hello.yml"}, code: exitUsage, stderr: "profile \"nope\" is not defined"},
	})
}

func TestValidateJSONIsItselfAValidConfiguration(t *testing.T) {
	stdout := mustRunCLI(t, "validate", "--json", "../testdata/configs/service-replica-groups.yml")
	var generic map[string]any
	if err := json.Unmarshal([]byte(stdout), &generic); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, stdout)
	}
	cfg, err := api.Parse("out.json", []byte(stdout))
	if err != nil {
		t.Fatalf("--json output does not parse as a configuration: %v", err)
	}
	if cfg.Service == nil || len(cfg.Service.Replicas.Groups) != 2 {
		t.Fatalf("want a service with two replica groups, got %+v", cfg)
	}
}

func TestValidateMergesTheDefaultProfileFromTheWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".dstack"), 0o755); err != nil {
		t.Fatal(err)
	}
	profiles := "profiles:\n  - name: spot\n    default: true\n    spot_policy: spot\n  - name: big\n    max_price: 99\n"
	writeTestFile(t, filepath.Join(dir, ".dstack", "profiles.yml"), profiles)
	task, err := filepath.Abs("../testdata/hello.yml")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("HOME", t.TempDir())
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"validate", "--json", task}, `"spot_policy": "spot"`},
		{[]string{"validate", "--json", "--profile", "big", task}, `"max_price": 99`},
	} {
		if stdout := mustRunCLI(t, tt.args...); !strings.Contains(stdout, tt.want) {
			t.Errorf("%v: output lacks %s:\n%s", tt.args, tt.want, stdout)
		}
	}
}

func TestValidateReadsStandardInputForDash(t *testing.T) {
	first := mustRunCLI(t, "validate", "--json", "../testdata/configs/fleet-ssh.yml")
	var second, stderr bytes.Buffer
	app := newApp(new(bytes.Buffer), &stderr)
	app.Reader, app.Writer = strings.NewReader(first), &second
	if err := app.Run([]string{"gpud", "validate", "--json", "-"}); err != nil {
		t.Fatalf("validate - : %v (%s)", err, stderr.String())
	}
	if first != second.String() {
		t.Fatalf("--json piped back through validate - changed:\n%s\n%s", first, second.String())
	}
}
