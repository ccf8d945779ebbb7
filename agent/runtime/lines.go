package runtime

import (
	"bytes"
	"time"

	"gpud.dev/gpud/api"
)

// maxLine bounds one log line; longer output is split so a job writing no
// newline cannot grow the agent's memory.
const maxLine = 64 << 10

// LineWriter turns a byte stream into log lines of one stream. Now stamps
// lines that carry no time of their own. It is not safe for concurrent use.
type LineWriter struct {
	Stream api.LogStream
	Emit   func(api.JobLogEntry) error
	Now    func() time.Time
	buf    []byte
}

// Write emits every complete line in p and keeps the rest for later.
func (w *LineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 && len(w.buf) < maxLine {
			return len(p), nil
		}
		if i < 0 {
			i = maxLine
		}
		line := string(w.buf[:i])
		w.buf = w.buf[min(i+1, len(w.buf)):]
		if err := w.Emit(api.JobLogEntry{Time: w.Now(), Stream: w.Stream, Line: line}); err != nil {
			return len(p), err
		}
	}
}

// Flush emits a last line that ended without a newline.
func (w *LineWriter) Flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	line := string(w.buf)
	w.buf = nil
	return w.Emit(api.JobLogEntry{Time: w.Now(), Stream: w.Stream, Line: line})
}
