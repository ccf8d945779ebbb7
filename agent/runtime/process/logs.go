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
	br := bufio.NewReader(f)
	var partial []byte
	events := make([]byte, 4096)
	final := false
	for {
		line, err := br.ReadBytes('\n')
		partial = append(partial, line...)
		if err == nil {
			if e, ok := decodeEntry(partial, opts); ok {
				if err := emit(e); err != nil {
					return err
				}
			}
			partial = partial[:0]
			continue
		}
		if !errors.Is(err, io.EOF) {
			return fmt.Errorf("job %s: logs: %w", h.JobID, err)
		}
		if !opts.Follow {
			return nil
		}
		if final {
			return nil
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

func decodeEntry(b []byte, opts runtime.LogOptions) (api.JobLogEntry, bool) {
	var e api.JobLogEntry
	if json.Unmarshal(b, &e) != nil {
		return e, false
	}
	if !opts.Since.IsZero() && e.Time.Before(opts.Since) {
		return e, false
	}
	if (e.Stream == api.LogStdout && !opts.Stdout) || (e.Stream == api.LogStderr && !opts.Stderr) {
		return e, false
	}
	return e, true
}
