package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
)

// TestFollowLogsEndsWhenTheJobEnds: a follow stream ends once the job is
// final and its output delivered, woken by the job's end rather than by
// the wait timeout, which the server here sets to an hour: a stream that
// relied on it would outlast the client's one-minute limit.
func TestFollowLogsEndsWhenTheJobEnds(t *testing.T) {
	ts := startServerWith(t, Options{FakeGPUs: "1xH100:80GB", Runtime: "process", LogWaitTimeout: time.Hour})
	cases := []struct {
		name     string
		commands string
		lines    []string
		status   string
	}{
		{"output then exit 0", "[echo first, sleep 0.3, echo last]", []string{"first", "last"}, "done"},
		{"output then exit 3", "[echo only, exit 3]", []string{"only"}, "failed"},
		{"no output", "[sleep 0.2]", nil, "done"},
	}
	hc := &http.Client{Timeout: time.Minute}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := "follow-" + string(rune('a'+i))
			yaml := "type: task\nname: " + name + "\ncommands: " + c.commands + "\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n"
			ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(yaml), nil)
			req, _ := http.NewRequest("GET", ts.URL()+"/api/v1/projects/main/runs/"+name+"/logs?follow=true", nil)
			req.Header.Set("Authorization", "Bearer "+ts.admin)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("follow: %v", err)
			}
			defer resp.Body.Close()
			var lines []string
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				var e api.LogEntry
				if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
					t.Fatalf("line %q: %v", sc.Text(), err)
				}
				lines = append(lines, e.Line)
			}
			if err := sc.Err(); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) || strings.Contains(err.Error(), "Timeout") {
					t.Fatalf("the stream did not end with the job (it waited on the timeout): %v", err)
				}
				t.Fatalf("stream: %v", err)
			}
			if strings.Join(lines, "\n") != strings.Join(c.lines, "\n") {
				t.Fatalf("lines %q, want %q", lines, c.lines)
			}
			jobs := ts.store.Jobs().ByRun(runID(t, ts, name))
			if len(jobs) != 1 || jobs[0].Status != c.status {
				t.Fatalf("after the stream ended the job is %+v, want one %s job", jobs, c.status)
			}
		})
	}
}

// runID returns the id of the run named name in project main.
func runID(t *testing.T, ts *testServer, name string) string {
	t.Helper()
	var run api.Run
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/"+name, nil, &run)
	return run.ID
}

// manyLinesTask writes 20,000 lines of lengths from 0 to about 900 bytes
// (ASCII and three-byte characters; every 1000th line empty) to stdout,
// then a single 3,000,000-byte line, then "done" to stderr.
const manyLinesTask = `type: task
name: NAME
commands:
  - |
    perl -e 'for my $i (0..19999) { print(($i % 1000 == 999) ? "\n" : sprintf("%05d ", $i) . ("ab\xe2\x82\xac" x (($i * 7919) % 180)) . "\n") } print "y" x 3000000, "\n"; print STDERR "done\n"'
resources:
  cpu: 0..
  memory: 1MB..
  disk: 1GB..
`

// manyLines is what manyLinesTask writes to stdout, line by line.
func manyLines() []string {
	out := make([]string, 0, 20001)
	for i := range 20000 {
		if i%1000 == 999 {
			out = append(out, "")
			continue
		}
		out = append(out, fmt.Sprintf("%05d ", i)+strings.Repeat("ab€", (i*7919)%180))
	}
	return append(out, strings.Repeat("y", 3_000_000))
}

// TestLogsAPIReturnsEveryLineOfAJob is the reproduction of issue 11 item
// 2: a job writes 20,000 lines of varied length and one 3 MB line. The
// API used to show 19,987 of them (it dropped the partial last line of
// every 256 KiB read) and never the 3 MB line. Now every line comes back,
// whole and in order: following while the job runs, reading after it
// ended, resuming at entries' offsets, and through the API client that
// `gpud logs` uses.
func TestLogsAPIReturnsEveryLineOfAJob(t *testing.T) {
	ts := startServerWith(t, Options{FakeGPUs: "1xH100:80GB", Runtime: "process"})
	ts.submit(strings.Replace(manyLinesTask, "NAME", "many", 1))
	want := manyLines()
	check := func(how string, es []api.LogEntry) {
		t.Helper()
		got := joinLines(t, es)
		out := got[api.LogStdout]
		if len(out) != len(want) {
			t.Fatalf("%s: %d stdout lines, want %d", how, len(out), len(want))
		}
		for i := range want {
			if out[i] != want[i] {
				t.Fatalf("%s: line %d is %d bytes %.40q, want %d bytes %.40q", how, i, len(out[i]), out[i], len(want[i]), want[i])
			}
		}
		if e := got[api.LogStderr]; len(e) != 1 || e[0] != "done" {
			t.Fatalf("%s: stderr %q", how, e)
		}
		for i := 1; i < len(es); i++ {
			if es[i].Offset <= es[i-1].Offset {
				t.Fatalf("%s: offsets go back at entry %d: %d after %d", how, i, es[i].Offset, es[i-1].Offset)
			}
		}
	}
	followed := ts.getLogs("many", "follow=true")
	check("followed while the job ran", followed)
	all := ts.getLogs("many", "")
	check("read after the job ended", all)
	job := all[0].Job
	for _, k := range []int{0, 1, 4999, 12345, len(all) - 3, len(all) - 2} {
		rest := ts.getLogs("many", fmt.Sprintf("job=%s&offset=%d", job, all[k].Offset))
		if len(rest) != len(all)-k-1 || rest[0].Offset != all[k+1].Offset || rest[0].Line != all[k+1].Line {
			t.Fatalf("resumed after entry %d: %d entries, want %d from offset %d", k, len(rest), len(all)-k-1, all[k+1].Offset)
		}
	}
	cl, err := api.NewClient(ts.URL(), ts.admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	var viaClient []api.LogEntry
	if err := cl.RunLogs(t.Context(), "main", "many", api.LogOptions{Follow: true}, func(e api.LogEntry) error {
		viaClient = append(viaClient, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	check("through the API client", viaClient)
}
