package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"time"

	agentclient "gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// storedLine is one log line as kept in the store's log files (NDJSON).
type storedLine struct {
	T time.Time     `json:"t"`
	S api.LogStream `json:"s"`
	L string        `json:"l"`
}

// followLogs copies a job's output from its agent into the store's logs
// until the job ends. After a server restart it resumes after the last
// line it kept, so lines are neither lost nor doubled.
func (s *Server) followLogs(ctx context.Context, id string, link *agentLink) {
	since := s.lastLogTime(id)
	follow := true
	for ctx.Err() == nil {
		err := link.client.Logs(ctx, id, agentclient.LogOptions{Follow: follow, Since: since}, func(e api.JobLogEntry) error {
			if !e.Time.After(since) && !since.IsZero() {
				return nil
			}
			since = e.Time
			b, _ := json.Marshal(storedLine{T: e.Time, S: e.Stream, L: e.Line})
			_, err := s.store.Logs().Append(id, append(b, '\n'))
			return err
		})
		if err == nil || agentclient.IsNotFound(err) || !follow {
			return
		}
		if j, gerr := s.store.Jobs().Get(id); gerr != nil || finishedJob(j.Status) {
			// The job ended without its agent's stream ending (its host was
			// lost): one last read without follow picks up what the agent
			// still has, then stop instead of retrying for ever.
			follow = false
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// lastLogTime reads the time of the last line kept for the job.
func (s *Server) lastLogTime(id string) time.Time {
	var last time.Time
	off := int64(0)
	for {
		data, _, next, err := s.store.Logs().Read(id, off, 1<<20)
		if err != nil || len(data) == 0 {
			return last
		}
		lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
		var l storedLine
		if json.Unmarshal(lines[len(lines)-1], &l) == nil {
			last = l.T
		}
		off = next
	}
}

// handleLogs streams a run's logs as NDJSON (see api/server.go).
func (s *Server) handleLogs(w http.ResponseWriter, r *http.Request) error {
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
	jobs := s.store.Jobs().ByRun(run.ID)
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].ID < jobs[j].ID })
	st, _ := decodeSpec[runState](run)
	var ids []string
	for _, j := range jobs {
		js, _ := decodeSpec[jobState](j)
		if want := q.Get("job"); want != "" && want != j.ID && want != j.Name {
			continue
		}
		if js.Attempt == st.Attempt || q.Get("job") != "" {
			ids = append(ids, j.ID)
		}
	}
	if len(ids) == 0 {
		return notFound("job", q.Get("job"))
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	var sub *store.Subscription
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()
	// With several jobs, each is streamed in turn (node 0 first); a client
	// wanting one job passes ?job=.
	for _, id := range ids {
		off := offset
		for {
			data, _, next, err := s.store.Logs().Read(id, off, 256<<10)
			if err != nil {
				return nil
			}
			sc := bufio.NewScanner(bytes.NewReader(data))
			sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
			pos := off
			for sc.Scan() {
				pos += int64(len(sc.Bytes())) + 1
				var l storedLine
				if json.Unmarshal(sc.Bytes(), &l) != nil {
					continue
				}
				if enc.Encode(api.LogEntry{Job: id, Offset: pos, Time: l.T, Stream: l.S, Line: l.L}) != nil {
					return nil
				}
			}
			if flusher != nil {
				flusher.Flush()
			}
			off = next
			if len(data) > 0 {
				continue
			}
			if !follow {
				break
			}
			// Take the wake-ups before looking, so an end in between wakes us.
			if sub == nil {
				sub = s.store.Subscribe(id, store.KindJob)
			}
			released := s.working.releases()
			if s.jobLogsComplete(id) {
				break
			}
			if !s.waitLogs(r.Context(), id, off, sub, released) || r.Context().Err() != nil {
				return nil
			}
		}
		if sub != nil {
			sub.Close()
			sub = nil
		}
	}
	return nil
}

// waitLogs waits until the job has output past off, its record changes
// (it ends), a log follower finishes (released), or LogWaitTimeout passes
// (a safety net only: the wake-ups end a follow right after the job). It
// returns false once the store has closed (the server is stopping).
func (s *Server) waitLogs(ctx context.Context, id string, off int64, sub *store.Subscription, released <-chan struct{}) bool {
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
	_ = s.store.Logs().Wait(wctx, id, off)
	cancel()
	// The next look happens after the waker has stopped taking changes, so
	// a change it did not take stays queued for the next wait.
	<-done
	return open
}

// jobLogsComplete reports whether a job is final and its log follower has
// finished copying its output.
func (s *Server) jobLogsComplete(id string) bool {
	j, err := s.store.Jobs().Get(id)
	if err != nil || !finishedJob(j.Status) {
		return err != nil
	}
	return !s.working.held("logs/" + id)
}
