package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// cliCase is one gpud invocation and what it must exit with and print.
type cliCase struct {
	name   string
	args   []string // after "gpud"
	code   int
	stdout string // must appear in stdout ("" always does)
	stderr string // must appear in stderr ("" always does)
	// check, when set, makes further assertions on stdout.
	check func(t *testing.T, stdout string)
}

// runCLI runs gpud in-process with args (after "gpud") and returns what it
// printed and its exit code.
func runCLI(args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = run(append([]string{"gpud"}, args...), &out, &errOut)
	return out.String(), errOut.String(), code
}

// mustRunCLI runs gpud like runCLI and fails the test unless it exits 0;
// it returns stdout.
func mustRunCLI(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, code := runCLI(args...)
	if code != 0 {
		t.Fatalf("gpud %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return stdout
}

// testCLICases runs each case as a subtest and checks its exit code and
// output.
func testCLICases(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(tt.args...)
			if code != tt.code {
				t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.stdout) {
				t.Errorf("stdout:\n%s\nwant it to contain:\n%s", stdout, tt.stdout)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr:\n%s\nwant it to contain:\n%s", stderr, tt.stderr)
			}
			if tt.check != nil {
				tt.check(t, stdout)
			}
		})
	}
}

// writeTestFile writes content to path or fails the test.
func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
