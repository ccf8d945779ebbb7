package main

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
	if err := os.WriteFile(bad, []byte("type: task\ncommands: [x]\nresources:\n  gpu: H100:x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args      []string
		code      int
		stdout    string
		stderr    string
		notStderr string
	}{
		{name: "valid file prints the normalized spec", args: []string{"validate", "testdata/hello.yml"}, code: 0,
			stdout: "# testdata/hello.yml: valid task \"hello\"\ntype: task\nname: hello"},
		{name: "invalid file exits 1 with position, caret and fix", args: []string{"validate", bad}, code: exitInvalidInput,
			stderr: bad + ":4:8: resources.gpu: \"H100:x\" — count must be a number or range like 2 or 1..8\n      gpu: H100:x\n           ^"},
		{name: "every file is checked even after an invalid one", args: []string{"validate", bad, "testdata/hello.yml"}, code: exitInvalidInput,
			stdout: "valid task \"hello\"", stderr: "1 of 2 files are invalid"},
		{name: "missing file is invalid input", args: []string{"validate", "testdata/no-such.yml"}, code: exitInvalidInput, stderr: "no such file"},
		{name: "no file is a usage error", args: []string{"validate"}, code: exitUsage, stderr: "give at least one configuration file"},
		{name: "unknown flag is a usage error", args: []string{"validate", "--jsn", "testdata/hello.yml"}, code: exitUsage},
		{name: "unknown profile is a usage error", args: []string{"validate", "--profile", "nope", "testdata/hello.yml"}, code: exitUsage, stderr: "profile \"nope\" is not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"gpud"}, tt.args...), &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.stdout) {
				t.Errorf("stdout:\n%s\nwant it to contain:\n%s", stdout.String(), tt.stdout)
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr:\n%s\nwant it to contain:\n%s", stderr.String(), tt.stderr)
			}
		})
	}
}

func TestValidateJSONIsItselfAValidConfiguration(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"gpud", "validate", "--json", "testdata/configs/service-replica-groups.yml"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var generic map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &generic); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, stdout.String())
	}
	cfg, err := api.Parse("out.json", stdout.Bytes())
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
	if err := os.WriteFile(filepath.Join(dir, ".dstack", "profiles.yml"), []byte(profiles), 0o644); err != nil {
		t.Fatal(err)
	}
	task, err := filepath.Abs("testdata/hello.yml")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("HOME", t.TempDir())
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"gpud", "validate", "--json", task}, `"spot_policy": "spot"`},
		{[]string{"gpud", "validate", "--json", "--profile", "big", task}, `"max_price": 99`},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tt.args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", tt.args, code, stderr.String())
		}
		if !strings.Contains(stdout.String(), tt.want) {
			t.Errorf("%v: output lacks %s:\n%s", tt.args, tt.want, stdout.String())
		}
	}
}

func TestValidateReadsStandardInputForDash(t *testing.T) {
	var first, stderr bytes.Buffer
	if code := run([]string{"gpud", "validate", "--json", "testdata/configs/fleet-ssh.yml"}, &first, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	app := newApp(new(bytes.Buffer), &stderr)
	var second bytes.Buffer
	app.Reader, app.Writer = bytes.NewReader(first.Bytes()), &second
	if err := app.Run([]string{"gpud", "validate", "--json", "-"}); err != nil {
		t.Fatalf("validate - : %v (%s)", err, stderr.String())
	}
	if first.String() != second.String() {
		t.Fatalf("--json piped back through validate - changed:\n%s\n%s", first.String(), second.String())
	}
}
