package runtime

import (
	"context"
	"io"
	"net"
)

// WindowSize is a terminal's size in characters.
type WindowSize struct {
	Rows, Cols uint16
}

// ExecRequest is one command run inside a running job, as `docker exec`
// does: in the job's container (docker) or as the job's user, in its
// working directory and with its environment (process).
type ExecRequest struct {
	// Command is the command line, run by the job's shell; empty starts
	// an interactive login shell.
	Command string
	// TTY allocates a terminal of Size; Term is its TERM.
	TTY  bool
	Term string
	Size WindowSize
	// Env is added to the job's environment (NAME=value).
	Env []string
	// Stdin, Stdout and Stderr are the command's streams; with TTY the
	// terminal's output all goes to Stdout. Stdin may be nil.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Resize delivers window changes while the command runs (TTY only);
	// nil means none.
	Resize <-chan WindowSize
}

// Execer is a runtime that can run commands inside its running jobs. Exec
// blocks until the command ends and returns its exit code; ending ctx
// kills the command.
type Execer interface {
	Exec(ctx context.Context, h Handle, req ExecRequest) (int, error)
}

// PortDialer is a runtime that can open a TCP connection to a port on a
// running job's own loopback (SSH port forwarding): what the job itself
// reaches at 127.0.0.1:port, in its network namespace.
type PortDialer interface {
	DialJob(ctx context.Context, h Handle, port int) (net.Conn, error)
}
