package daemon

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
)

// TestLogsMarkOutputTheStoreDoesNotKeep: with a 64 KiB log limit, a line
// larger than the limit is replaced by a marker entry saying how much was
// not kept (the store used to keep the line's tail, which the reader then
// could not decode), and once the limit drops older output, a reader
// starting before the kept part gets a marker saying how many bytes are
// gone, followed by whole lines: never a line cut at its start.
func TestLogsMarkOutputTheStoreDoesNotKeep(t *testing.T) {
	ts := startServerWith(t, Options{FakeGPUs: "1xH100:80GB", Runtime: "process", LogLimit: 64 << 10})
	job := ts.finishedJob("marked")
	keep := func(stream api.LogStream, line string) {
		t.Helper()
		if err := ts.dispatcher.keepLogEntry(job, api.JobLogEntry{Time: time.Now(), Stream: stream, Line: line}); err != nil {
			t.Fatal(err)
		}
	}
	keep(api.LogStdout, "first")
	keep(api.LogStdout, strings.Repeat("z", 100<<10))
	keep(api.LogStdout, "after")
	es := ts.getLogs("marked", "job="+job)
	if len(es) != 3 || es[0].Line != "first" || es[2].Line != "after" {
		t.Fatalf("%d entries, want first, a marker, after", len(es))
	}
	if m := es[1]; m.Dropped < 100<<10 || m.Stream != api.LogStdout || !strings.Contains(m.Line, "not kept") {
		t.Fatalf("marker for the oversized line: %+v", m)
	}
	afterOffset := es[1].Offset

	var written []string
	for i := range 2000 {
		l := fmt.Sprintf("%04d %s", i, strings.Repeat("q", i%150))
		written = append(written, l)
		keep(api.LogStderr, l)
	}
	for _, from := range []string{"job=" + job, fmt.Sprintf("job=%s&offset=%d", job, afterOffset)} {
		es = ts.getLogs("marked", from)
		gap := es[0]
		if gap.Dropped <= 0 || !strings.Contains(gap.Line, "gone") {
			t.Fatalf("%s: first entry %+v, want a marker for the dropped output", from, gap)
		}
		rest := es[1:]
		tail := written[len(written)-len(rest):]
		for i, e := range rest {
			if e.Dropped != 0 || e.Line != tail[i] {
				t.Fatalf("%s: entry %d after the marker is %q, want %q", from, i, e.Line, tail[i])
			}
		}
		if len(rest) < 300 {
			t.Fatalf("%s: only %d lines kept of a 64 KiB log", from, len(rest))
		}
		if again := ts.getLogs("marked", fmt.Sprintf("job=%s&offset=%d", job, gap.Offset)); len(again) != len(rest) || again[0] != rest[0] {
			t.Fatalf("resuming at the marker's offset: %d entries, want the %d kept ones", len(again), len(rest))
		}
	}
}

// TestLogFollowerResumesWithoutLosingOrRepeatingEntries: the server's
// copy of a job's output, broken after any entry (a server restart, an
// agent reconnect), resumes from what the store kept: the agent is asked
// for entries from logResume's time and sends them again in the same
// order; the kept log ends up with every entry exactly once. The agent's
// entries share timestamps and go back in time a little (two streams
// stamped by two writers), which a resume by "after the last time" got
// wrong: it dropped entries with the same time and those stamped earlier.
func TestLogFollowerResumesWithoutLosingOrRepeatingEntries(t *testing.T) {
	ts := startServerWith(t, Options{FakeGPUs: "1xH100:80GB", Runtime: "process"})
	rng := rand.New(rand.NewPCG(3, 4))
	base := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	var agent []api.JobLogEntry // what the agent has, in its order
	at := base
	for i := range 400 {
		switch r := rng.IntN(10); {
		case r < 3: // the same time as the previous entry
		case r < 5: // stamped a little before the previous one
			at = at.Add(-time.Duration(rng.IntN(5000)) * time.Microsecond)
		default:
			at = at.Add(time.Duration(rng.IntN(20000)) * time.Microsecond)
		}
		s := api.LogStdout
		if rng.IntN(3) == 0 {
			s = api.LogStderr
		}
		agent = append(agent, api.JobLogEntry{Time: at, Stream: s, Line: fmt.Sprintf("entry %d", i), Partial: i%7 == 3})
	}
	for n, cut := range []int{0, 1, 2, 57, 133, 200, 399, 400} {
		job := ts.finishedJob(fmt.Sprintf("resume-%d", n))
		for _, e := range agent[:cut] {
			if err := ts.dispatcher.keepLogEntry(job, e); err != nil {
				t.Fatal(err)
			}
		}
		// The copy breaks after cut entries and starts again, twice.
		for range 2 {
			since, keep, err := ts.dispatcher.logResume(job)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range agent {
				if since.IsZero() || !e.Time.Before(since) { // the agent's filter
					if err := keep(e); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		var got bytes.Buffer
		for _, e := range ts.getLogs(fmt.Sprintf("resume-%d", n), "job="+job) {
			fmt.Fprintf(&got, "%s %s %v|", e.Stream, e.Line, e.Partial)
		}
		var want bytes.Buffer
		for _, e := range agent {
			fmt.Fprintf(&want, "%s %s %v|", e.Stream, e.Line, e.Partial)
		}
		if got.String() != want.String() {
			t.Fatalf("broken after %d entries, the kept log is\n%s\nwant\n%s", cut, got.String(), want.String())
		}
	}
}
