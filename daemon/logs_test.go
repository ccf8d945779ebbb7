package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
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
