package runtime

import (
	"bytes"
	"time"
	"unicode/utf8"

	"gpud.dev/gpud/api"
)

// LineWriter turns a byte stream into log entries of one stream: one entry
// per line, without its newline. A line longer than api.MaxLogLine (Max
// when set) becomes pieces of at most that many bytes, cut at a UTF-8
// character boundary, every piece but the last marked Partial, so a job
// writing no newline cannot grow the agent's memory past the bound and a
// reader joins the pieces back byte for byte. Each entry is stamped with
// Now when it is emitted, so one writer's entries never go back in time (a
// reader resuming by time relies on it). It is not safe for concurrent use.
type LineWriter struct {
	Stream api.LogStream
	Emit   func(api.JobLogEntry) error
	Now    func() time.Time
	// Max overrides api.MaxLogLine as the longest entry (tests cut small).
	Max int

	buf    []byte // the current line's bytes not yet emitted
	inLine bool   // a line has begun and not ended
}

// Write emits every complete line in p and keeps the rest for later.
func (w *LineWriter) Write(p []byte) (int, error) {
	n := len(p)
	limit := w.Max
	if limit <= 0 {
		limit = api.MaxLogLine
	}
	for len(p) > 0 {
		w.inLine = true
		end := bytes.IndexByte(p, '\n')
		newline := end >= 0
		if !newline {
			end = len(p)
		}
		if room := limit - len(w.buf); end > room {
			// The line is longer than an entry: emit a full piece.
			w.buf = append(w.buf, p[:room]...)
			p = p[room:]
			cut := pieceEnd(w.buf)
			if err := w.emit(w.buf[:cut], true); err != nil {
				return n, err
			}
			w.buf = append(w.buf[:0], w.buf[cut:]...) // a character cut in two moves on
			continue
		}
		w.buf = append(w.buf, p[:end]...)
		if !newline {
			break
		}
		p = p[end+1:]
		if err := w.emitLast(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Flush emits a last line that ended without a newline, and ends a line
// whose pieces were emitted (with an empty last piece if need be), so no
// Partial entry is left without its end.
func (w *LineWriter) Flush() error {
	if !w.inLine {
		return nil
	}
	return w.emitLast()
}

func (w *LineWriter) emitLast() error {
	err := w.emit(w.buf, false)
	w.inLine = false
	if cap(w.buf) > 1<<20 {
		w.buf = nil // do not pin a long line's buffer
	} else {
		w.buf = w.buf[:0]
	}
	return err
}

func (w *LineWriter) emit(b []byte, partial bool) error {
	return w.Emit(api.JobLogEntry{Time: w.Now(), Stream: w.Stream, Line: string(b), Partial: partial})
}

// pieceEnd returns where to cut a full piece b so that no UTF-8 character
// is split (JSON would turn each half into U+FFFD): before a last character
// that b holds only the start of, else at its end. Bytes that are not UTF-8
// are cut anywhere; they do not survive JSON anyway.
func pieceEnd(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if !utf8.RuneStart(b[i]) {
			continue
		}
		if i > 0 && !utf8.FullRune(b[i:]) {
			return i
		}
		break
	}
	return len(b)
}
