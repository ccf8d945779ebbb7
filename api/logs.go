package api

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// MaxLogLine is the longest line of job output that travels whole, in
// bytes: from the runtime through the agent's stream, the server's log
// store and the logs API to `gpud logs`. A longer line is cut into pieces
// of at most MaxLogLine bytes (at a UTF-8 character boundary); every piece
// but the last has Partial set (JobLogEntry.Partial, LogEntry.Partial), and
// joining the pieces of a stream in order, with no separator, gives the line
// back byte for byte. Nothing else splits a line.
const MaxLogLine = 16 << 20

// MaxLogRecord bounds one encoded log entry (one NDJSON line) that a reader
// of a log stream accepts: a MaxLogLine line whose every byte JSON escapes
// to six ("\u0000"), plus room for the other fields.
const MaxLogRecord = 6*MaxLogLine + 64<<10

// ErrLineTooLong is returned by ReadLines for a line longer than its bound.
var ErrLineTooLong = errors.New("line longer than the reader's bound")

// ReadLines calls each with every newline-terminated line that r yields,
// without the newline, however the bytes arrive (a line may span any number
// of reads). A line longer than max bytes ends the read with ErrLineTooLong
// instead of growing memory further; bytes after the last newline (a
// stream cut inside a record) end it with io.ErrUnexpectedEOF, never as a
// line. The slice passed to each is valid only during the call.
func ReadLines(r io.Reader, max int, each func(line []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte // a line longer than the reader's buffer, gathered here
	for {
		frag, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(frag) > max {
				return fmt.Errorf("%w (%d bytes)", ErrLineTooLong, max)
			}
			long = append(long, frag...)
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(long)+len(frag) > 0 {
				return io.ErrUnexpectedEOF
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		line := frag[:len(frag)-1]
		if len(long) > 0 {
			long = append(long, line...)
			line = long
		}
		if len(line) > max {
			return fmt.Errorf("%w (%d bytes)", ErrLineTooLong, max)
		}
		if err := each(line); err != nil {
			return err
		}
		if cap(long) > 1<<20 {
			long = nil // do not pin a huge buffer for the rest of a stream
		} else {
			long = long[:0]
		}
	}
}
