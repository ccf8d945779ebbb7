package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// DefaultLogLimit is the bytes of log kept per job; older bytes are dropped
// first, a segment at a time.
const DefaultLogLimit = 50 << 20

// ErrLogTooLarge is returned by Append for a record that the job's log
// limit cannot hold; nothing is written.
var ErrLogTooLarge = errors.New("log record larger than the job's log limit")

// Logs keeps job logs off the state file's write path: each job has a
// directory of append-only segment files named by the byte offset they start
// at. Appends are not fsynced (logs are not state): they survive a crash of
// gpud but not of the machine. Offsets are absolute and never reused, so a
// reader can resume with the offset Read returned.
//
// A job's log is a sequence of records, each one Append ending in a
// newline. A record is never split across segments, so dropping the oldest
// segments drops whole records and the oldest kept byte always starts one;
// a record cut short by a crash of gpud inside an Append is removed when
// the log is next opened, so the next record does not run into it.
type Logs struct {
	dir      string
	limit    int64
	segLimit int64
	mu       sync.Mutex
	jobs     map[string]*jobLog
}

type jobLog struct {
	mu     sync.Mutex
	dir    string
	starts []int64 // segment start offsets, ascending
	end    int64   // offset after the last byte
	f      *os.File
	full   bool          // the last segment takes no more (a write to it failed)
	notify chan struct{} // closed and replaced on every append
}

func newLogs(dir string, limit int64) *Logs {
	if limit <= 0 {
		limit = DefaultLogLimit
	}
	seg := limit / 8
	if seg < 1 {
		seg = 1
	}
	return &Logs{dir: dir, limit: limit, segLimit: seg, jobs: map[string]*jobLog{}}
}

// Logs returns the store's job log keeper.
func (s *Store) Logs() *Logs { return s.logs }

func (l *Logs) job(id string) (*jobLog, error) {
	if id == "" || strings.ContainsAny(id, "/\\\x00") || id == "." || id == ".." {
		return nil, fmt.Errorf("%w: job id %q cannot name a log directory", ErrInvalid, id)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if j := l.jobs[id]; j != nil {
		return j, nil
	}
	j := &jobLog{dir: filepath.Join(l.dir, id), notify: make(chan struct{})}
	ents, err := os.ReadDir(j.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("job %s logs: %w", id, err)
	}
	for _, e := range ents {
		n, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".seg"), 10, 64)
		if err == nil && strings.HasSuffix(e.Name(), ".seg") {
			j.starts = append(j.starts, n)
		}
	}
	sort.Slice(j.starts, func(a, b int) bool { return j.starts[a] < j.starts[b] })
	if n := len(j.starts); n > 0 {
		fi, err := os.Stat(j.segPath(j.starts[n-1]))
		if err != nil {
			return nil, fmt.Errorf("job %s logs: %w", id, err)
		}
		size, err := repairTail(j.segPath(j.starts[n-1]), fi.Size())
		if err != nil {
			return nil, fmt.Errorf("job %s logs: %w", id, err)
		}
		j.end = j.starts[n-1] + size
	}
	l.jobs[id] = j
	return j, nil
}

// repairTail cuts a last segment of size bytes back to its last newline,
// removing a record that an interrupted Append left unfinished, and returns
// the size it keeps.
func repairTail(path string, size int64) (int64, error) {
	if size == 0 {
		return 0, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	keep := int64(0)
	for end := size; end > 0; {
		start := max(end-int64(len(buf)), 0)
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			keep = start + int64(i) + 1
			break
		}
		end = start
	}
	if keep == size {
		return size, nil
	}
	if err := f.Truncate(keep); err != nil {
		return 0, err
	}
	return keep, nil
}

func (j *jobLog) segPath(start int64) string {
	return filepath.Join(j.dir, fmt.Sprintf("%020d.seg", start))
}

// Limit is the bytes of log kept per job: the largest record Append takes.
func (l *Logs) Limit() int64 { return l.limit }

// Append adds the record p (ending in a newline) to the job's log in one
// segment, drops the oldest segments beyond the limit, and wakes
// followers. It returns the offset after p. A record larger than the limit
// is refused with ErrLogTooLarge; one that does not end in a newline with
// ErrInvalid. A failed write is cut back out of the log.
func (l *Logs) Append(jobID string, p []byte) (int64, error) {
	j, err := l.job(jobID)
	if err != nil {
		return 0, err
	}
	if int64(len(p)) > l.limit {
		return 0, fmt.Errorf("job %s logs: %w (%d bytes, limit %d)", jobID, ErrLogTooLarge, len(p), l.limit)
	}
	if len(p) == 0 || p[len(p)-1] != '\n' {
		return 0, fmt.Errorf("%w: job %s logs: a record must end in a newline", ErrInvalid, jobID)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.ensureSegment(l.segLimit, int64(len(p))); err != nil {
		return 0, fmt.Errorf("job %s logs: %w", jobID, err)
	}
	if _, err := j.f.Write(p); err != nil {
		// The file may hold part of p: cut it back. If even that fails,
		// stop appending to it and move on to a fresh segment after what
		// it holds; a reader then meets an unreadable record (and says so)
		// instead of one record running into the next.
		last := j.starts[len(j.starts)-1]
		if terr := j.f.Truncate(j.end - last); terr != nil {
			j.closeFile()
			if fi, serr := os.Stat(j.segPath(last)); serr == nil {
				j.end = last + fi.Size()
			}
			j.full = true
		}
		return 0, fmt.Errorf("job %s logs: %w", jobID, err)
	}
	j.end += int64(len(p))
	for len(j.starts) > 1 && j.end-j.starts[0] > l.limit {
		if err := os.Remove(j.segPath(j.starts[0])); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("job %s logs: %w", jobID, err)
		}
		j.starts = j.starts[1:]
	}
	close(j.notify)
	j.notify = make(chan struct{})
	return j.end, nil
}

// ensureSegment opens the last segment for append, or starts a new one when
// there is none or the last cannot take a record of size bytes without
// passing segLimit (a record larger than segLimit gets a segment of its
// own).
func (j *jobLog) ensureSegment(segLimit, size int64) error {
	n := len(j.starts)
	if n > 0 && !j.full && (j.end == j.starts[n-1] || j.end-j.starts[n-1]+size <= segLimit) {
		if j.f != nil {
			return nil
		}
		f, err := os.OpenFile(j.segPath(j.starts[n-1]), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		j.f = f
		return err
	}
	j.closeFile()
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(j.segPath(j.end), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	j.f = f
	j.full = false
	j.starts = append(j.starts, j.end)
	return nil
}

func (j *jobLog) closeFile() {
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
}

// Read returns up to max bytes of the job's log from offset. If offset is
// older than the oldest kept byte, reading starts there instead: from tells
// where the data begins, next is the offset to read from next time. A job
// without logs reads as empty.
func (l *Logs) Read(jobID string, offset int64, max int) (data []byte, from, next int64, err error) {
	j, err := l.job(jobID)
	if err != nil {
		return nil, 0, 0, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.starts) == 0 || offset >= j.end {
		return nil, j.end, j.end, nil
	}
	if offset < j.starts[0] {
		offset = j.starts[0]
	}
	from = offset
	want := j.end - offset
	if int64(max) < want {
		want = int64(max)
	}
	data = make([]byte, 0, want)
	for i := len(j.starts) - 1; i >= 0 && int64(len(data)) < want; i-- {
		if j.starts[i] > offset {
			continue
		}
		for ; i < len(j.starts) && int64(len(data)) < want; i++ {
			f, err := os.Open(j.segPath(j.starts[i]))
			if err != nil {
				return nil, 0, 0, fmt.Errorf("job %s logs: %w", jobID, err)
			}
			pos := offset + int64(len(data)) - j.starts[i]
			buf := make([]byte, want-int64(len(data)))
			n, err := f.ReadAt(buf, pos)
			f.Close()
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, 0, 0, fmt.Errorf("job %s logs: %w", jobID, err)
			}
			data = append(data, buf[:n]...)
		}
		break
	}
	return data, from, from + int64(len(data)), nil
}

// Wait blocks until the job's log extends past offset or ctx ends: a
// follower calls Read, then Wait with the offset Read returned.
func (l *Logs) Wait(ctx context.Context, jobID string, offset int64) error {
	j, err := l.job(jobID)
	if err != nil {
		return err
	}
	for {
		j.mu.Lock()
		end, ch := j.end, j.notify
		j.mu.Unlock()
		if end > offset {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for job %s logs: %w", jobID, ctx.Err())
		}
	}
}

// Remove deletes the job's logs.
func (l *Logs) Remove(jobID string) error {
	j, err := l.job(jobID)
	if err != nil {
		return err
	}
	l.mu.Lock()
	delete(l.jobs, jobID)
	l.mu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closeFile()
	j.starts, j.end = nil, 0
	if err := os.RemoveAll(j.dir); err != nil {
		return fmt.Errorf("job %s logs: %w", jobID, err)
	}
	return nil
}

func (l *Logs) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, j := range l.jobs {
		j.mu.Lock()
		j.closeFile()
		j.mu.Unlock()
	}
}
