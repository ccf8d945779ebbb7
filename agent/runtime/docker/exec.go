package docker

import (
	"context"
	"fmt"
	"io"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"gpud.dev/gpud/agent/runtime"
)

var _ runtime.Execer = (*Runtime)(nil)

// Exec runs req in the job's container as `docker exec` does: as the
// container's user, in its working directory, with its environment plus
// req.Env; with a TTY the engine allocates the terminal and resizes it on
// each window change. The image needs a /bin/sh (for a login shell, bash
// when it has one); nothing is installed into it.
func (r *Runtime) Exec(ctx context.Context, h runtime.Handle, req runtime.ExecRequest) (int, error) {
	cmd := []string{"/bin/sh", "-c", req.Command}
	if req.Command == "" {
		cmd = []string{"/bin/sh", "-c", `if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi`}
	}
	env := append([]string(nil), req.Env...)
	if req.Term != "" {
		env = append(env, "TERM="+req.Term)
	}
	size := client.ConsoleSize{}
	if req.TTY {
		size = client.ConsoleSize{Height: uint(max(req.Size.Rows, 1)), Width: uint(max(req.Size.Cols, 1))}
	}
	created, err := r.cli.ExecCreate(ctx, h.ID, client.ExecCreateOptions{
		TTY: req.TTY, ConsoleSize: size, AttachStdin: req.Stdin != nil, AttachStdout: true, AttachStderr: true,
		Env: env, Cmd: cmd,
	})
	if err != nil {
		return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
	}
	att, err := r.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{TTY: req.TTY, ConsoleSize: size})
	if err != nil {
		return -1, fmt.Errorf("job %s: exec: attach: %w", h.JobID, err)
	}
	defer att.Close()
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()
	if req.TTY && req.Resize != nil {
		go func() {
			for ws := range req.Resize {
				// A lost resize is harmless: the exec may just have ended.
				_, _ = r.cli.ExecResize(context.WithoutCancel(ctx), created.ID, client.ExecResizeOptions{Height: uint(ws.Rows), Width: uint(ws.Cols)})
			}
		}()
	}
	if req.Stdin != nil {
		go func() {
			_, _ = io.Copy(att.Conn, req.Stdin) // ends when either side closes
			if !req.TTY {
				// The command sees EOF. A terminal has no end of input
				// (sshd keeps a pty open too): closing it would hang the
				// exec's terminal up before its output is read.
				_ = att.CloseWrite()
			}
		}()
	}
	if req.TTY {
		_, err = io.Copy(req.Stdout, att.Reader)
	} else {
		_, err = stdcopy.StdCopy(req.Stdout, req.Stderr, att.Reader)
	}
	if err != nil && ctx.Err() == nil {
		return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
	}
	ins, err := r.cli.ExecInspect(context.WithoutCancel(ctx), created.ID, client.ExecInspectOptions{})
	if err != nil {
		return -1, fmt.Errorf("job %s: exec: %w", h.JobID, err)
	}
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	return ins.ExitCode, nil
}
