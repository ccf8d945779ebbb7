package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// getLogs reads a run's logs through the HTTP API with query (e.g.
// "follow=true", "job=ID&offset=N") and returns the entries. Records are
// read with the API's own reader, which takes any line up to
// api.MaxLogRecord (a bufio.Scanner would stop at its buffer).
func (ts *testServer) getLogs(run, query string) []api.LogEntry {
	ts.t.Helper()
	return ts.projectLogs("main", run, query)
}

// projectLogs is getLogs for a run of any project.
func (ts *testServer) projectLogs(project, run, query string) []api.LogEntry {
	ts.t.Helper()
	req, err := http.NewRequest("GET", ts.URL()+"/api/v1/projects/"+project+"/runs/"+run+"/logs?"+query, nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ts.admin)
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		ts.t.Fatalf("logs of %s: %v", run, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		ts.t.Fatalf("logs of %s?%s: status %d", run, query, resp.StatusCode)
	}
	var out []api.LogEntry
	err = api.ReadLines(resp.Body, api.MaxLogRecord, func(b []byte) error {
		var e api.LogEntry
		if err := json.Unmarshal(b, &e); err != nil {
			return fmt.Errorf("entry %d: %w", len(out), err)
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		ts.t.Fatalf("logs of %s?%s: %v", run, query, err)
	}
	return out
}

// lineTexts returns the entries' lines, in order.
func lineTexts(es []api.LogEntry) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.Line)
	}
	return out
}

// joinLines rejoins entries into each stream's lines: a Partial piece
// continues with the next entry of its stream.
func joinLines(t testing.TB, es []api.LogEntry) map[api.LogStream][]string {
	t.Helper()
	lines := map[api.LogStream][]string{}
	open := map[api.LogStream]*strings.Builder{}
	for _, e := range es {
		if e.Dropped > 0 {
			t.Fatalf("a marker for %d bytes not kept at offset %d: %s", e.Dropped, e.Offset, e.Line)
		}
		b := open[e.Stream]
		if b == nil {
			b = &strings.Builder{}
			open[e.Stream] = b
		}
		b.WriteString(e.Line)
		if !e.Partial {
			lines[e.Stream] = append(lines[e.Stream], b.String())
			b.Reset()
		}
	}
	for s, b := range open {
		if b.Len() > 0 {
			t.Fatalf("stream %s ends inside a line (%d bytes of pieces)", s, b.Len())
		}
	}
	return lines
}

// finishedJob applies a task that exits at once, waits until it is done
// and its log follower has finished, and returns its job id: a job whose
// stored log a test then writes itself.
func (ts *testServer) finishedJob(name string) string {
	ts.t.Helper()
	ts.submit("type: task\nname: " + name + "\ncommands: [\"true\"]\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n")
	run := ts.waitRunEnd(name, time.Minute)
	if len(run.Jobs) != 1 {
		ts.t.Fatalf("run %s has %d jobs", name, len(run.Jobs))
	}
	id := run.Jobs[0].ID
	testutil.Eventually(ts.t, time.Minute, func() error {
		if !ts.runsAPI.jobLogsComplete(id) {
			return fmt.Errorf("job %s: its log follower still runs", id)
		}
		return nil
	})
	return id
}

// sizes lists the byte lengths of lines, for failure messages.
func sizes(lines []string) []int {
	out := make([]int, len(lines))
	for i, l := range lines {
		out[i] = len(l)
	}
	return out
}
