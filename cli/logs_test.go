package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/agent/runtime/process"
	"gpud.dev/gpud/daemon"
	"gpud.dev/gpud/internal/testutil"
)

// envShimHelper makes TestProcessShimHelper act as the process runtime's
// shim in a re-executed test binary (the server of a CLI test starts jobs
// as processes, and this package's test binary has no "agent shim").
const envShimHelper = "GPUD_TEST_SHIM_HELPER"

// TestProcessShimHelper is not a test: run with envShimHelper set and a
// job directory as its argument, it is the shim of that job.
func TestProcessShimHelper(t *testing.T) {
	if os.Getenv(envShimHelper) == "" || flag.NArg() != 1 {
		t.Skip("the process shim of CLI tests, not a test")
	}
	os.Exit(process.RunShim(flag.Arg(0)))
}

// TestLogsCommandPrintsEveryLineWhole is the CLI half of the reproduction
// of issue 11 item 2: a job writes 20,000 lines of varied length and a
// single 3,000,000-byte line; `gpud run` (following) and `gpud logs` print
// exactly those bytes to stdout, where they used to miss 13 lines and the
// long line.
func TestLogsCommandPrintsEveryLineWhole(t *testing.T) {
	serveProcessJobsForCLI(t)

	var want strings.Builder
	for i := range 20000 {
		if i%1000 != 999 {
			fmt.Fprintf(&want, "%05d %s", i, strings.Repeat("ab€", (i*7919)%180))
		}
		want.WriteByte('\n')
	}
	want.WriteString(strings.Repeat("y", 3_000_000) + "\n")
	task := filepath.Join(t.TempDir(), "many.yml")
	writeTestFile(t, task, `type: task
name: many
commands:
  - |
    perl -e 'for my $i (0..19999) { print(($i % 1000 == 999) ? "\n" : sprintf("%05d ", $i) . ("ab\xe2\x82\xac" x (($i * 7919) % 180)) . "\n") } print "y" x 3000000, "\n"; print STDERR "done\n"'
resources:
  cpu: 0..
  memory: 1MB..
  disk: 1GB..
`)
	for _, args := range [][]string{{"run", "-y", task}, {"logs", "many"}} {
		stdout, stderr, code := runCLI(args...)
		if code != 0 {
			t.Fatalf("gpud %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		if stdout != want.String() {
			got := strings.Split(stdout, "\n")
			t.Fatalf("gpud %s: stdout is %d bytes in %d lines, want %d bytes in 20,001 lines", strings.Join(args, " "), len(stdout), len(got)-1, want.Len())
		}
		if !strings.Contains(stderr, "done\n") {
			t.Errorf("gpud %s: stderr lacks the job's line: %q", strings.Join(args, " "), stderr)
		}
	}
	// The JSON form carries offsets that resume exactly after a line.
	stdout, _, code := runCLI("logs", "--json", "many")
	if code != 0 || bytes.Count([]byte(stdout), []byte("\n")) != 20002 {
		t.Fatalf("gpud logs --json: exit %d, %d entries, want 20,002", code, bytes.Count([]byte(stdout), []byte("\n")))
	}
}

// serveForCLI starts a real server for a CLI test (a fresh data dir,
// loopback, no logs) and points the commands at it through GPUD_HOME,
// GPUD_SERVER and GPUD_TOKEN; it stops when the test ends.
func serveForCLI(t *testing.T, opts daemon.Options) *daemon.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	opts.DataDir, opts.Listen, opts.Logger = t.TempDir(), "127.0.0.1:0", zerolog.Nop()
	srv, err := daemon.New(ctx, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	go srv.Run(ctx)
	t.Cleanup(func() {
		cancel()
		srv.Close()
		testutil.KillJobsUnder(opts.DataDir) // process jobs' shims outlive the server by design
	})
	t.Setenv("GPUD_HOME", t.TempDir())
	t.Setenv("GPUD_SERVER", srv.URL())
	t.Setenv("GPUD_TOKEN", srv.AdminToken())
	return srv
}

// serveProcessJobsForCLI is serveForCLI with a 1xH100 host whose process
// jobs run through this test binary's shim (TestProcessShimHelper).
func serveProcessJobsForCLI(t *testing.T) *daemon.Server {
	t.Helper()
	t.Setenv(envShimHelper, "1")
	return serveForCLI(t, daemon.Options{FakeGPUs: "1xH100:80GB", Runtime: "process",
		ShimCommand: []string{os.Args[0], "-test.run=^TestProcessShimHelper$"}})
}
