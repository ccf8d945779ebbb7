package daemon

import (
	"bytes"
)

// logSource is the part of *store.Logs a cursor reads through.
type logSource interface {
	// Read returns up to max bytes from offset; from is where they begin
	// (later than offset when older bytes were dropped).
	Read(jobID string, offset int64, max int) (data []byte, from, next int64, err error)
}

// logRecord is one whole record of a job's stored log, or a gap.
type logRecord struct {
	data []byte // the record without its newline; valid until the next call
	end  int64  // offset after the record (after the gap)
	// gap: the log limit removed dropped bytes before end that this cursor
	// had not read; data is empty.
	gap     bool
	dropped int64
}

// logCursor reads a job's stored log record by record, however the store's
// reads cut the bytes: a record is returned only whole, a record longer
// than one read is gathered over several, and older output that the log
// limit removed under the cursor is reported as a gap, never skipped in
// silence. A cursor started inside a record begins with the next one.
type logCursor struct {
	logs logSource
	job  string
	off  int64  // offset of pend[0]
	pend []byte // bytes read and not yet returned
	// scanned counts the bytes of pend known to hold no newline.
	scanned int
	align   bool // off may be inside a record: skip to the next newline first
}

// logReadSize is the least a cursor reads at once; a record longer than
// that is read in steps that double, so a long record costs O(n) copying.
// Returned records alias the cursor's buffer; append reallocates it as it
// grows, so a returned record is never overwritten before the next call.
const logReadSize = 256 << 10

func newLogCursor(logs logSource, job string, offset int64) *logCursor {
	return &logCursor{logs: logs, job: job, off: offset, align: offset > 0}
}

// next returns the next record, or ok false when the log holds no whole
// record past the cursor yet (wait for the log to grow past waitOffset).
func (c *logCursor) next() (rec logRecord, ok bool, err error) {
	for {
		if c.align {
			if done, err := c.alignStart(); err != nil || !done {
				return logRecord{}, false, err
			}
		}
		if i := bytes.IndexByte(c.pend[c.scanned:], '\n'); i >= 0 {
			n := c.scanned + i
			rec = logRecord{data: c.pend[:n], end: c.off + int64(n) + 1}
			c.pend, c.off, c.scanned = c.pend[n+1:], rec.end, 0
			return rec, true, nil
		}
		c.scanned = len(c.pend)
		want := max(logReadSize, len(c.pend))
		at := c.off + int64(len(c.pend))
		data, from, _, err := c.logs.Read(c.job, at, want)
		if err != nil {
			return logRecord{}, false, err
		}
		if from > at {
			// The limit dropped the oldest segments: what was not read
			// yet (with any record begun in pend) is gone. The store drops
			// whole records, so from starts one.
			gap := logRecord{end: from, gap: true, dropped: from - c.off}
			c.pend, c.off, c.scanned = append(c.pend[:0], data...), from, 0
			return gap, true, nil
		}
		if len(data) == 0 {
			return logRecord{}, false, nil
		}
		c.pend = append(c.pend, data...)
	}
}

// alignStart makes a cursor that a client started at an arbitrary offset
// begin at a record: if the byte before off is not a newline, the rest of
// that record is skipped. done is false while the log does not reach off.
func (c *logCursor) alignStart() (done bool, err error) {
	data, from, _, err := c.logs.Read(c.job, c.off-1, 1)
	if err != nil {
		return false, err
	}
	switch {
	case from > c.off-1:
		// off-1 is no longer kept (or off is the oldest kept byte, which
		// starts a record): reading at off meets the store's first record
		// or reports the gap.
	case len(data) == 0:
		return false, nil // the log does not reach off yet
	case data[0] != '\n':
		for {
			d, from, next, err := c.logs.Read(c.job, c.off, logReadSize)
			if err != nil {
				return false, err
			}
			if from > c.off {
				c.off = from // dropped meanwhile: from starts a record
				break
			}
			if i := bytes.IndexByte(d, '\n'); i >= 0 {
				c.off += int64(i) + 1
				break
			}
			if len(d) == 0 {
				return false, nil // the record goes on past the log's end
			}
			c.off = next
		}
	}
	c.align = false
	return true, nil
}

// waitOffset is the offset past which the log must grow for next to have
// more to read.
func (c *logCursor) waitOffset() int64 { return c.off + int64(len(c.pend)) }
