package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// Logs streams the container's output from the engine's log store (which
// outlives the agent), demultiplexed into stdout and stderr lines with the
// engine's own timestamps.
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
	stamped := func(e api.JobLogEntry) error {
		// The engine prefixes each line with its RFC 3339 time and a space.
		if ts, rest, ok := strings.Cut(e.Line, " "); ok {
			if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
				e.Time, e.Line = t, rest
			}
		}
		if !opts.Since.IsZero() && e.Time.Before(opts.Since) {
			return nil
		}
		return emit(e)
	}
	out := &runtime.LineWriter{Stream: api.LogStdout, Emit: stamped, Now: time.Now}
	errw := &runtime.LineWriter{Stream: api.LogStderr, Emit: stamped, Now: time.Now}
	if _, err := stdcopy.StdCopy(out, errw, rc); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("job %s: logs: %w", h.JobID, err)
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if err := errw.Flush(); err != nil {
		return err
	}
	return ctx.Err()
}
