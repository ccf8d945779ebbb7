package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// handleLogs streams a run's logs as NDJSON (see api/server.go): one
// api.LogEntry per stored record, each emitted only once the record is
// whole, with Offset the byte offset after it.
func (s *runsAPI) handleLogs(w http.ResponseWriter, r *http.Request) error {
	run, err := s.authorizedRun(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	follow := q.Get("follow") == "true"
	offset := int64(0)
	if v := q.Get("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			return badField("offset", "%q: want a byte offset from a previous LogEntry", v)
		}
	}
	ids, err := s.logJobs(run, q.Get("job"), q.Get("attempt"))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	out := &logWriter{w: w, enc: json.NewEncoder(w)}
	out.flusher, _ = w.(http.Flusher)
	// With several jobs, each is streamed in turn (node 0 first); a client
	// wanting one job passes ?job=.
	for _, id := range ids {
		if err := s.streamJobLogs(r.Context(), out, id, offset, follow); err != nil {
			s.log.Debug().Err(err).Str("job", id).Msg("log stream ended")
			return nil // the status line is sent: the client sees the stream end
		}
	}
	return nil
}

// logJobs returns the ids of the run's jobs whose logs a request reads,
// in id order: those of one attempt (attempt, counted from 1; empty: the
// latest), or of them the one named by job. A job id names one job of any
// attempt; a job name ("run-0-0") is the same in every attempt, so it is
// read in the attempt chosen. Earlier attempts' jobs and logs are kept.
func (s *runsAPI) logJobs(run store.Record, job, attempt string) ([]string, error) {
	jobs := s.store.Jobs().ByRun(run.ID)
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ID < jobs[j].ID })
	st, err := decodeSpec[runState](run)
	if err != nil {
		return nil, err
	}
	want := st.Attempt // the records count attempts from 0
	if attempt != "" {
		n, err := strconv.Atoi(attempt)
		if err != nil || n < 1 || n > st.Attempt+1 {
			return nil, badField("attempt", "%q: run %s has attempts 1 to %d", attempt, run.Name, st.Attempt+1)
		}
		want = n - 1
	}
	var ids []string
	for _, j := range jobs {
		if job != "" && job != j.ID && job != j.Name {
			continue
		}
		js, err := decodeSpec[jobRecordSpec](j)
		if err != nil {
			return nil, err
		}
		if js.Attempt == want || job == j.ID && attempt == "" {
			ids = append(ids, j.ID)
		}
	}
	if len(ids) == 0 {
		return nil, notFound("job", job)
	}
	return ids, nil
}

// streamJobLogs writes one job's entries from offset; with follow it waits
// for more until the job is final and its output copied.
func (s *runsAPI) streamJobLogs(ctx context.Context, out *logWriter, id string, offset int64, follow bool) error {
	var sub *store.Subscription
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()
	c := newLogCursor(s.store.Logs(), id, offset)
	final := false // the job is done: read to the end once more, then stop
	for {
		rec, ok, err := c.next()
		if err != nil {
			return err
		}
		if ok {
			e := entryOf(id, rec)
			if rec.gap {
				e = droppedEntry(id, rec.end, rec.dropped, s.store.Logs().Limit())
			}
			if err := out.write(e); err != nil {
				return err
			}
			continue
		}
		if err := out.flush(); err != nil {
			return err
		}
		if !follow || final {
			return nil
		}
		// Take the wake-ups before looking, so an end in between wakes us.
		if sub == nil {
			sub = s.store.Subscribe(id, store.KindJob)
		}
		released := s.working.releases()
		if s.jobLogsComplete(id) {
			// Output copied just before the copy finished may have landed
			// after the read above.
			final = true
			continue
		}
		if !s.waitLogs(ctx, id, c.waitOffset(), sub, released) || ctx.Err() != nil {
			return errors.New("the client left or the server is stopping")
		}
	}
}

// entryOf turns a stored record into the entry the API sends; a record
// that does not decode becomes a marker saying so rather than vanishing.
func entryOf(id string, rec logRecord) api.LogEntry {
	var l storedLine
	if err := json.Unmarshal(rec.data, &l); err != nil {
		n := int64(len(rec.data)) + 1
		return api.LogEntry{Job: id, Offset: rec.end, Stream: api.LogStderr, Dropped: n,
			Line: fmt.Sprintf("[gpud: a stored log record of %d bytes is unreadable: %v]", n, err)}
	}
	return api.LogEntry{Job: id, Offset: rec.end, Time: l.T, Stream: l.S, Line: l.L, Partial: l.P, Dropped: l.D}
}

// droppedEntry is the marker for older output the log limit removed
// before it was read: n bytes ending at offset at.
func droppedEntry(id string, at, n, limit int64) api.LogEntry {
	return api.LogEntry{Job: id, Offset: at, Stream: api.LogStderr, Dropped: n,
		Line: fmt.Sprintf("[gpud: %d bytes of older output are gone: the server keeps the last %d bytes of each job's log]", n, limit)}
}

// waitLogs waits until the job has output past off, its record changes
// (it ends), a log follower finishes (released), or LogWaitTimeout passes
// (a safety net only: the wake-ups end a follow right after the job). It
// returns false once the store has closed (the server is stopping).
func (s *runsAPI) waitLogs(ctx context.Context, id string, off int64, sub *store.Subscription, released <-chan struct{}) bool {
	wctx, cancel := context.WithTimeout(ctx, s.opts.LogWaitTimeout)
	defer cancel()
	done := make(chan struct{})
	open := true
	go func() {
		defer close(done)
		select {
		case _, open = <-sub.C:
		case <-released:
		case <-wctx.Done():
		}
		cancel()
	}()
	// Wait ends with an error when wctx ends, which is one of the ways a
	// wait is meant to end; the caller looks at the log again either way.
	_ = s.store.Logs().Wait(wctx, id, off)
	cancel()
	// The next look happens after the waker has stopped taking changes, so
	// a change it did not take stays queued for the next wait.
	<-done
	return open
}

// jobLogsComplete reports whether a job is final and its log follower has
// finished copying its output.
func (s *runsAPI) jobLogsComplete(id string) bool {
	j, err := s.store.Jobs().Get(id)
	if err != nil || !finishedJob(j.Status) {
		return err != nil
	}
	return !s.working.held("logs/" + id)
}

// logWriter writes entries to a logs response and flushes them.
type logWriter struct {
	w       http.ResponseWriter
	enc     *json.Encoder
	flusher http.Flusher
}

func (o *logWriter) write(e api.LogEntry) error { return o.enc.Encode(e) }

func (o *logWriter) flush() error {
	if o.flusher == nil {
		return nil
	}
	return http.NewResponseController(o.w).Flush()
}
