package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestLogsAttemptPrintsThatAttemptsOutput: a task retried once on error
// prints its attempt number (GPUD_RUN_ATTEMPT) in each attempt; `gpud run`
// follows it into the retry, `gpud logs RUN` prints the latest attempt's
// line, `--attempt 1` the first's, and an attempt the run never had is an
// error naming those it has.
func TestLogsAttemptPrintsThatAttemptsOutput(t *testing.T) {
	serveProcessJobsForCLI(t)

	task := filepath.Join(t.TempDir(), "retried.yml")
	writeTestFile(t, task, `type: task
name: retried
commands:
  - echo "attempt $GPUD_RUN_ATTEMPT"
  - test "$GPUD_RUN_ATTEMPT" -ge 2
retry:
  on_events: [error]
  duration: 1h
resources:
  cpu: 0..
  memory: 1MB..
  disk: 1GB..
`)
	// gpud run follows the retry: both attempts' output, then the exit
	// code of the attempt that ended the run.
	stdout, stderr, code := runCLI("run", "-y", task)
	if code != 0 || stdout != "attempt 1\nattempt 2\n" || !strings.Contains(stderr, "gpud: run retried, attempt 2: retrying after an error (job retried-0-0 exited with code 1): attempt 2 starts at ") {
		t.Fatalf("gpud run: exit %d, stdout %q, stderr %q; want both attempts' lines, a note on the retry, and 0", code, stdout, stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		// -f returns once the attempt's output is all delivered.
		{[]string{"logs", "-f", "retried"}, "attempt 2\n"},
		{[]string{"logs", "-f", "--attempt", "1", "retried"}, "attempt 1\n"},
		{[]string{"logs", "-f", "--attempt", "2", "retried"}, "attempt 2\n"},
	} {
		if got := mustRunCLI(t, c.args...); got != c.want {
			t.Errorf("gpud %s: %q, want %q", strings.Join(c.args, " "), got, c.want)
		}
	}
	_, stderr, code = runCLI("logs", "--attempt", "3", "retried")
	if code == 0 || !strings.Contains(stderr, "attempts 1 to 2") {
		t.Errorf("gpud logs --attempt 3: exit %d, stderr %q; want an error naming attempts 1 to 2", code, stderr)
	}
}
