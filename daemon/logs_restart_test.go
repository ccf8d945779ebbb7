package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// slowLinesTask writes 4,000 numbered lines over about four seconds.
const slowLinesTask = `type: task
name: slow
commands:
  - |
    perl -e '$| = 1; for my $i (0..3999) { print "line $i " . ("=" x ($i % 97)) . "\n"; select(undef, undef, undef, 0.05) if $i % 50 == 49 }'
resources:
  cpu: 0..
  memory: 1MB..
  disk: 1GB..
`

// followFrom streams the run's logs with follow from the job's offset and
// passes each entry to each; it returns nil when the stream ended as a
// follow ends (the job is done) and an error when it broke.
func followFrom(token, base, job string, offset int64, each func(api.LogEntry)) error {
	q := "follow=true"
	if job != "" {
		q += fmt.Sprintf("&job=%s&offset=%d", job, offset)
	}
	req, err := http.NewRequest("GET", base+"/api/v1/projects/main/runs/slow/logs?"+q, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return api.ReadLines(resp.Body, api.MaxLogRecord, func(b []byte) error {
		var e api.LogEntry
		if err := json.Unmarshal(b, &e); err != nil {
			return err
		}
		each(e)
		return nil
	})
}

// TestLogFollowAcrossAServerKillMissesAndRepeatsNothing: a client follows
// a job's output; the server process is killed with SIGKILL in the middle
// (the job keeps running under its shim and keeps writing) and started
// again. The client resumes with ?offset= of the last entry it got; the
// restarted server resumes its copy from the agent where its kept log
// ends. The client ends with every one of the 4,000 lines exactly once, in
// order.
func TestLogFollowAcrossAServerKillMissesAndRepeatsNothing(t *testing.T) {
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	first := startServerProcess(t, dir, listen)
	base := "http://" + listen
	ts := &testServer{t: t, admin: first.token, Server: &Server{url: base}}
	ts.submit(slowLinesTask)

	var got []api.LogEntry
	killed := false
	var second *serverProcess
	t.Cleanup(func() {
		ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/slow/stop", api.StopRunRequest{Abort: true}, nil)
		for _, p := range []*serverProcess{first, second} {
			if p != nil && p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				_ = p.cmd.Wait()
			}
		}
	})
	job, offset := "", int64(0)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := followFrom(ts.admin, base, job, offset, func(e api.LogEntry) {
			got = append(got, e)
			job, offset = e.Job, e.Offset
			if !killed && len(got) == 1000 {
				killed = true
				_ = first.cmd.Process.Signal(syscall.SIGKILL)
			}
		})
		if err == nil && killed && second != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follow did not end: %d lines, last error %v", len(got), err)
		}
		if killed && second == nil {
			_ = first.cmd.Wait()
			second = startServerProcess(t, dir, listen)
		}
	}
	if len(got) != 4000 {
		t.Fatalf("%d lines after the restart, want 4000", len(got))
	}
	for i, e := range got {
		if want := fmt.Sprintf("line %d ", i) + strings.Repeat("=", i%97); e.Line != want {
			t.Fatalf("entry %d is %q, want %q", i, e.Line, want)
		}
	}
}
