package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/daemon"
	"gpud.dev/gpud/internal/clientconf"
)

// clientFlags are the flags of every command that talks to a server.
func clientFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "project", Aliases: []string{"p"}, Usage: "the project (default: $GPUD_PROJECT, the server entry's project, or main)"},
		&cli.StringFlag{Name: "server", Usage: "the server entry of ~/.gpud/config.yml to use (default: the current one; $GPUD_SERVER overrides the file)"},
	}, extra...)
}

// resolveTarget reads the client config and picks the server and project.
func resolveTarget(c *cli.Context) (clientconf.Target, error) {
	home, err := clientconf.Home(os.Getenv)
	if err != nil {
		return clientconf.Target{}, err
	}
	file, _, err := clientconf.Load(clientconf.Path(home))
	if err != nil {
		return clientconf.Target{}, err
	}
	return clientconf.Resolve(os.Getenv, file, c.String("server"), c.String("project"))
}

// errNoServer explains what to do when a command needs a server and none is
// configured (only gpud run has an embedded default).
var errNoServer = errors.New("no server is configured — start one with gpud serve and run " +
	"gpud login --url URL --token TOKEN, or set GPUD_SERVER and GPUD_TOKEN")

// connect returns a client of the configured server for commands that have
// no embedded default.
func connect(c *cli.Context) (*api.Client, clientconf.Target, error) {
	t, err := resolveTarget(c)
	if err != nil {
		return nil, t, err
	}
	if t.Embedded {
		return nil, t, errNoServer
	}
	cl, err := api.NewClient(t.URL, t.Token, nil)
	return cl, t, err
}

// startEmbedded starts the in-process server and local agent; the returned
// function shuts it down. The local agent runs a run without an image as
// processes on this machine and one with an image in Docker when Docker is
// reachable (the daemon's choice, named on the first line gpud prints).
func (s *runSession) startEmbedded(ctx context.Context, c *cli.Context) (func(), error) {
	home, err := clientconf.Home(os.Getenv)
	if err != nil {
		return nil, err
	}
	logger := *zerolog.Ctx(c.Context)
	if !rootFlagSet(c, "log-level") {
		// The embedded server's routine logs would drown the job's output.
		logger = logger.Level(zerolog.WarnLevel)
	}
	srv, url, token, err := daemon.StartEmbedded(ctx, daemon.EmbeddedOptions{DataDir: filepath.Join(home, "server"), Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("start the embedded server: %w", err)
	}
	if s.client, err = api.NewClient(url, token, nil); err != nil {
		srv.Close()
		return nil, err
	}
	s.embedded, s.assumeYes, s.project = true, true, daemon.DefaultProject
	runtime := "local agent"
	if is, err := s.client.ListInstances(ctx, s.project); err == nil && len(is) > 0 && is[0].Runtime != "" {
		runtime += ", " + is[0].Runtime + " runtime"
	}
	// One line, once: a workstation that meant to reach a team server
	// learns here that it did not, and how to point it at one.
	fmt.Fprintf(s.errw, "gpud: no server configured (gpud login to use one): running on an embedded server in this process (%s), state in %s\n", runtime, home)
	return func() { _ = srv.Close() }, nil
}

// rootFlagSet reports whether a global flag was given on the command line.
func rootFlagSet(c *cli.Context, name string) bool {
	for _, l := range c.Lineage() {
		if l.IsSet(name) {
			return true
		}
	}
	return false
}

// connectRun reads a command's one RUN argument and connects to the
// server: the preamble of the commands that act on one run.
func connectRun(c *cli.Context) (string, *api.Client, clientconf.Target, error) {
	name, err := oneArg(c, "run")
	if err != nil {
		return "", nil, clientconf.Target{}, err
	}
	cl, t, err := connect(c)
	return name, cl, t, err
}
