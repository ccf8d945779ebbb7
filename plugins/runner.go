package plugins

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"

	"github.com/hashicorp/go-plugin/runner"
)

// procRunner runs a plugin as a subprocess for go-plugin (its RunnerFunc),
// like go-plugin's own command runner, and in addition says when the
// process ended (exited), which go-plugin does not expose: the supervisor
// restarts a crashed plugin on that event rather than by polling.
type procRunner struct {
	cmd            *exec.Cmd
	stdout, stderr io.ReadCloser
	pid            int
	exited         chan struct{}
	once           sync.Once
	err            error
}

var _ runner.Runner = (*procRunner)(nil)

func newProcRunner(cmd *exec.Cmd) (*procRunner, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	return &procRunner{cmd: cmd, stdout: stdout, stderr: stderr, exited: make(chan struct{})}, nil
}

func (r *procRunner) Start(context.Context) error {
	if err := r.cmd.Start(); err != nil {
		r.once.Do(func() { r.err = err; close(r.exited) })
		return err
	}
	r.pid = r.cmd.Process.Pid
	return nil
}

// Wait waits for the process; go-plugin calls it once, from its own
// goroutine, after Start.
func (r *procRunner) Wait(context.Context) error {
	err := r.cmd.Wait()
	r.once.Do(func() { r.err = err; close(r.exited) })
	return err
}

func (r *procRunner) Kill(context.Context) error {
	if r.cmd.Process == nil {
		return nil
	}
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *procRunner) Name() string          { return r.cmd.Path }
func (r *procRunner) ID() string            { return strconv.Itoa(r.pid) }

func (r *procRunner) Diagnose(context.Context) string {
	return "the executable did not answer the go-plugin handshake: is it a gpud backend plugin built for this machine?"
}

func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
