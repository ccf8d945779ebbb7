package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestExitCodeComesFromTheErrorTypeNotItsText: the exit code is chosen by
// the error's type, wherever it is wrapped; an error that merely reads like
// a usage error (a server's message quoting one) is a failure, exit 1.
func TestExitCodeComesFromTheErrorTypeNotItsText(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		code   int
		stderr string
	}{
		{"a usage error", usageError(errors.New("give a file")), exitUsage, "gpud: give a file\n"},
		{"a wrapped usage error", fmt.Errorf("run: %w", usageError(errors.New("-d needs a server"))), exitUsage, "gpud: -d needs a server\n"},
		{"invalid input is printed as is", invalidInputf("gpud validate: %d of %d files are invalid", 1, 2), exitInvalidInput, "gpud validate: 1 of 2 files are invalid\n"},
		{"a wrapped invalid input", fmt.Errorf("apply: %w", invalidInput(errors.New("gpud apply: bad"))), exitInvalidInput, "gpud apply: bad\n"},
		{"a job's exit code", exitWith(42, "gpud: run x failed: job 0 exited with code 42"), 42, "gpud: run x failed: job 0 exited with code 42\n"},
		{"a wrapped job exit", fmt.Errorf("follow: %w", exitWith(143, "")), 143, ""},
		{"a second Ctrl-C prints nothing", exitWith(exitInterrupted, ""), 130, ""},
		{"the library's own exit coder", cli.Exit("No help topic for 'x'", 3), 3, "No help topic for 'x'\n"},
		{"a failure is exit 1", errors.New("connection refused"), exitInvalidInput, "gpud: connection refused\n"},
		{"text like a flag error is no usage error", errors.New("server: flag provided but not defined: -x"), exitInvalidInput, "gpud: server: flag provided but not defined: -x\n"},
		{"text like a required flag is no usage error", errors.New(`Required flag "url" not set`), exitInvalidInput, "gpud: Required flag \"url\" not set\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := exitCode(tt.err, &stderr); code != tt.code {
				t.Errorf("exit code %d, want %d", code, tt.code)
			}
			if stderr.String() != tt.stderr {
				t.Errorf("stderr %q, want %q", stderr.String(), tt.stderr)
			}
		})
	}
}

// TestCommandLineErrorsAreUsageErrors: the library's complaints about a
// command line (an unknown flag, gpud help's too; a missing required flag)
// reach exitCode as usage errors and exit 2 with the command's help where
// the library showed it.
func TestCommandLineErrorsAreUsageErrors(t *testing.T) {
	t.Setenv("GPUD_HOME", t.TempDir())
	t.Setenv("GPUD_TOKEN", "unset below") // restored after the test
	if err := os.Unsetenv("GPUD_TOKEN"); err != nil {
		t.Fatal(err)
	}
	testCLICases(t, []cliCase{
		{name: "an unknown global flag", args: []string{"--bogus"}, code: exitUsage, stderr: "flag provided but not defined: -bogus"},
		{name: "an unknown flag of a command", args: []string{"ps", "--bogus"}, code: exitUsage, stderr: "flag provided but not defined: -bogus"},
		{name: "an unknown flag of a subcommand", args: []string{"admin", "backup", "--bogus"}, code: exitUsage, stderr: "flag provided but not defined: -bogus"},
		{name: "an unknown flag of help", args: []string{"help", "--bogus"}, code: exitUsage, stderr: "flag provided but not defined: -bogus"},
		{name: "an unknown flag of a command's help", args: []string{"admin", "help", "--bogus"}, code: exitUsage, stderr: "flag provided but not defined: -bogus"},
		{name: "login without its flags", args: []string{"login"}, code: exitUsage,
			stdout: "USAGE:\n   gpud login [command options]", stderr: `gpud: Required flags "url, token" not set`},
		{name: "login without --token", args: []string{"login", "--url", "http://127.0.0.1:1"}, code: exitUsage,
			stdout: "--token value", stderr: `gpud: Required flag "token" not set`},
		{name: "help for a command that does not exist", args: []string{"help", "nosuch"}, code: 3, stderr: "No help topic for 'nosuch'"},
	})
}
