package process

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// Logs reads the shim's output file. Following waits on inotify for the
// file to grow or exit.json to appear, so nothing polls.
func (r *Runtime) Logs(ctx context.Context, h runtime.Handle, opts runtime.LogOptions, emit func(api.JobLogEntry) error) error {
	dir := r.jobDir(h.JobID)
	var notify *os.File
	if opts.Follow {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			return fmt.Errorf("job %s: inotify: %w", h.JobID, err)
		}
		notify = os.NewFile(uintptr(fd), "inotify") // non-blocking: reads park in the runtime poller
		defer notify.Close()
		if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MODIFY|unix.IN_MOVED_TO|unix.IN_CREATE); err != nil {
			return fmt.Errorf("job %s: inotify: %w", h.JobID, err)
		}
		stop := context.AfterFunc(ctx, func() { notify.Close() })
		defer stop()
	}
	f, err := os.Open(filepath.Join(dir, fileOutput))
	if errors.Is(err, os.ErrNotExist) && !opts.Follow {
		return nil
	}
	if err != nil {
		return fmt.Errorf("job %s: logs: %w", h.JobID, err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	rd := &recordReader{opts: opts, emit: emit}
	events := make([]byte, 4096)
	final := false
	for {
		frag, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			rd.add(frag)
			continue
		}
		if err == nil {
			rd.add(frag)
			if err := rd.end(); err != nil {
				return err
			}
			continue
		}
		rd.add(frag)
		if !errors.Is(err, io.EOF) {
			return fmt.Errorf("job %s: logs: %w", h.JobID, err)
		}
		if final {
			// A record the shim did not finish (it was killed inside a
			// write) is reported, not passed over.
			return rd.torn()
		}
		if !opts.Follow {
			if _, err := os.Stat(filepath.Join(dir, fileExit)); err == nil {
				return rd.torn()
			}
			return nil // a record still being written is read next time
		}
		if _, err := os.Stat(filepath.Join(dir, fileExit)); err == nil {
			// The shim wrote all output before exit.json: drain once more.
			final = true
			continue
		} else if pid, ticks, perr := parseHandle(h.ID); perr == nil && !alive(pid, ticks) {
			final = true // lost: drain what is there, no more will come
			continue
		}
		if _, err := notify.Read(events); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("job %s: inotify: %w", h.JobID, err)
		}
	}
}

// recordReader gathers the shim's records (one api.JobLogEntry as JSON
// per line) however the reads cut them, up to api.MaxLogRecord each. A
// record it cannot decode, or one past the bound, becomes a marker entry on
// stderr saying so, stamped with the previous entry's time so that it
// keeps its place for a reader resuming by time.
type recordReader struct {
	opts    runtime.LogOptions
	emit    func(api.JobLogEntry) error
	buf     []byte
	over    int // bytes of a record past the bound, dropped
	last    time.Time
	pending bool // bytes of an unfinished record were seen
}

func (rd *recordReader) add(b []byte) {
	if len(b) > 0 {
		rd.pending = true
	}
	if rd.over > 0 || len(rd.buf)+len(b) > api.MaxLogRecord {
		rd.over += len(b)
		rd.over += len(rd.buf)
		rd.buf = rd.buf[:0]
		return
	}
	rd.buf = append(rd.buf, b...)
}

// end handles a complete record (the newline is the last byte added).
func (rd *recordReader) end() error {
	defer rd.reset()
	if rd.over > 0 {
		return rd.marker(fmt.Sprintf("[gpud: an output record of %d bytes is larger than %d and was left out]", rd.over, api.MaxLogRecord))
	}
	e, err := decodeEntry(rd.buf)
	if err != nil {
		return rd.marker(fmt.Sprintf("[gpud: an output record of %d bytes could not be read: %v]", len(rd.buf), err))
	}
	rd.last = e.Time
	if keep(e, rd.opts) {
		return rd.emit(e)
	}
	return nil
}

// torn reports the bytes of a record that never got its newline.
func (rd *recordReader) torn() error {
	if !rd.pending {
		return nil
	}
	defer rd.reset()
	return rd.marker(fmt.Sprintf("[gpud: the job's output ends inside a record (%d bytes): the shim stopped while writing it]", len(rd.buf)+rd.over))
}

func (rd *recordReader) marker(line string) error {
	e := api.JobLogEntry{Time: rd.last, Stream: api.LogStderr, Line: line}
	if keep(e, rd.opts) {
		return rd.emit(e)
	}
	return nil
}

func (rd *recordReader) reset() {
	rd.buf, rd.over, rd.pending = rd.buf[:0], 0, false
	if cap(rd.buf) > 1<<20 {
		rd.buf = nil
	}
}

func decodeEntry(b []byte) (api.JobLogEntry, error) {
	var e api.JobLogEntry
	err := json.Unmarshal(b, &e)
	return e, err
}

// keep applies the reader's options to an entry.
func keep(e api.JobLogEntry, opts runtime.LogOptions) bool {
	if !opts.Since.IsZero() && e.Time.Before(opts.Since) {
		return false
	}
	return (e.Stream != api.LogStdout || opts.Stdout) && (e.Stream != api.LogStderr || opts.Stderr)
}
