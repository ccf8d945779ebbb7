package cli

import "testing"

// TestJobRetentionFlags: gpud agent and gpud serve offer --job-retention
// with its default (an hour) and refuse one that is not positive as a
// usage error before they start anything.
func TestJobRetentionFlags(t *testing.T) {
	dir := t.TempDir()
	testCLICases(t, []cliCase{
		{name: "agent help shows the default", args: []string{"agent", "--help"}, code: 0, stdout: "--job-retention value"},
		{name: "serve help shows the default", args: []string{"serve", "--help"}, code: 0, stdout: "(default: 1h0m0s)"},
		{name: "agent, zero", args: []string{"agent", "--data-dir", dir, "--job-retention", "0s"}, code: exitUsage, stderr: "--job-retention 0s: give a positive duration"},
		{name: "serve, negative", args: []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--no-local-agent", "--job-retention", "-1m"},
			code: exitUsage, stderr: "--job-retention -1m0s: give a positive duration"},
	})
}
