package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/client"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// Logs streams the container's output from the engine's log store (which
// outlives the agent), demultiplexed into stdout and stderr lines with the
// engine's own timestamps.
//
// The engine keeps a line longer than 16 KiB as several messages, each
// sent as its own frame with its own timestamp prefix; only the last ends
// in a newline. Reading frame by frame strips every prefix and joins the
// messages back into the line (up to api.MaxLogLine, in pieces beyond), so
// a long line comes out as the job wrote it, not with timestamps inside.
func (r *Runtime) Logs(ctx context.Context, h runtime.Handle, opts runtime.LogOptions, emit func(api.JobLogEntry) error) error {
	o := client.ContainerLogsOptions{ShowStdout: opts.Stdout, ShowStderr: opts.Stderr, Follow: opts.Follow, Timestamps: true}
	if !opts.Since.IsZero() {
		o.Since = opts.Since.Format(time.RFC3339Nano)
	}
	rc, err := r.cli.ContainerLogs(ctx, h.ID, o)
	if err != nil {
		return fmt.Errorf("job %s: logs: %w", h.JobID, err)
	}
	defer rc.Close()
	if err := demuxLogs(rc, opts.Since, time.Now, emit); err != nil && ctx.Err() == nil {
		return fmt.Errorf("job %s: logs: %w", h.JobID, err)
	}
	return ctx.Err()
}

// maxFrame bounds one frame of the engine's log stream: one message, which
// the engine itself keeps to 16 KiB plus its timestamp.
const maxFrame = api.MaxLogLine + 64

// demuxLogs turns the engine's multiplexed, timestamped log stream into
// entries: each frame is one message, "<RFC 3339 time> <bytes>", the bytes
// of a message continuing the previous one of its stream unless that ended
// in a newline. An entry carries the time of the message that completed
// it (the engine gives all messages of a line the time of its first), and
// entries before since are left out. now stamps a message without a readable time. A last line
// without a newline is emitted when the stream ends.
func demuxLogs(r io.Reader, since time.Time, now func() time.Time, emit func(api.JobLogEntry) error) error {
	var frameTime time.Time
	filtered := func(e api.JobLogEntry) error {
		if !since.IsZero() && e.Time.Before(since) {
			return nil
		}
		return emit(e)
	}
	clock := func() time.Time { return frameTime }
	out := &runtime.LineWriter{Stream: api.LogStdout, Emit: filtered, Now: clock}
	errw := &runtime.LineWriter{Stream: api.LogStderr, Emit: filtered, Now: clock}
	err := readFrames(bufio.NewReaderSize(r, 64<<10), func(stream byte, payload []byte) error {
		w := out
		if stream == 2 {
			w = errw
		}
		frameTime = time.Time{}
		if ts, rest, ok := bytes.Cut(payload, []byte(" ")); ok {
			if t, err := time.Parse(time.RFC3339Nano, string(ts)); err == nil {
				frameTime, payload = t, rest
			}
		}
		if frameTime.IsZero() {
			frameTime = now()
		}
		_, err := w.Write(payload)
		return err
	})
	if err != nil {
		return err
	}
	if err := out.Flush(); err != nil {
		return err
	}
	return errw.Flush()
}

// readFrames calls each with every frame of an engine stream in the
// stdcopy format: an 8-byte header (stream: 0 stdin, 1 stdout, 2 stderr,
// 3 the engine's own error; three zero bytes; the payload size, big
// endian) and the payload. A stream that ends inside a frame ends with
// io.ErrUnexpectedEOF; the payload is valid only during the call.
func readFrames(r io.Reader, each func(stream byte, payload []byte) error) error {
	var hdr [8]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		size := binary.BigEndian.Uint32(hdr[4:])
		if size > maxFrame {
			return fmt.Errorf("a log frame of %d bytes, more than %d", size, maxFrame)
		}
		if cap(buf) < int(size) {
			buf = make([]byte, size)
		}
		payload := buf[:size]
		if _, err := io.ReadFull(r, payload); err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		switch hdr[0] {
		case 0, 1, 2:
			if err := each(hdr[0], payload); err != nil {
				return err
			}
		case 3:
			return fmt.Errorf("engine: %s", payload)
		default:
			return fmt.Errorf("a log frame of unknown stream %d", hdr[0])
		}
	}
}
