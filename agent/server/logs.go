package server

import (
	"encoding/json"
	"net/http"
	"time"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// logs streams a job's output. Query: follow, since (RFC 3339 or a
// duration), stdout and stderr (both by default), format=ndjson (default,
// api.JobLogEntry per line) or text, timestamps (text format only).
// Lines up to api.MaxLogLine come whole; longer ones as Partial pieces
// (in text, pieces are written without a newline between them).
// Every entry is flushed as it is written, so followers see lines live.
func (s *server) logs(w http.ResponseWriter, r *http.Request) {
	since, err := parseSince(r.URL.Query().Get("since"), time.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	id := r.PathValue("id")
	if _, err := s.a.Get(id); err != nil {
		fail(w, err)
		return
	}
	opts := runtime.LogOptions{
		Follow: boolParam(r, "follow", false), Since: since,
		Stdout: boolParam(r, "stdout", true), Stderr: boolParam(r, "stderr", true),
	}
	text := r.URL.Query().Get("format") == "text"
	stamps := boolParam(r, "timestamps", false)
	if text {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	enc := json.NewEncoder(w)
	err = s.a.Logs(r.Context(), id, opts, func(e api.JobLogEntry) error {
		var err error
		end := "\n"
		if e.Partial {
			end = "" // the next piece of this stream continues the line
		}
		switch {
		case !text:
			err = enc.Encode(e)
		case stamps:
			_, err = w.Write([]byte(e.Time.Format(time.RFC3339Nano) + " " + e.Line + end))
		default:
			_, err = w.Write([]byte(e.Line + end))
		}
		if flusher != nil {
			flusher.Flush()
		}
		return err
	})
	if err != nil && r.Context().Err() == nil {
		s.log.Warn().Err(err).Str("job", id).Msg("log stream ended early")
	}
}
