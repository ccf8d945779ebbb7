// Package cli is gpud's command line: the server (gpud serve), the host
// agent (gpud agent) and the client commands (gpud run, validate, ...).
//
// It only parses flags and calls into the packages below it; it holds no
// business logic. Each command lives in its own file, named after it.
package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X gpud.dev/gpud/cli.version=...".
var version = "dev"

// Main runs gpud with args (os.Args) on the process's standard streams and
// returns the process exit code.
func Main(args []string) int {
	return run(args, os.Stdout, os.Stderr)
}

// run builds the application and runs it, returning the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	if err := app.Run(args); err != nil {
		return exitCode(err, stderr)
	}
	return 0
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:                 "gpud",
		Usage:                "orchestrate GPU workloads: queues, gangs, fractional GPUs, services",
		Version:              version,
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: []string{"GPUD_LOG_LEVEL"}},
			&cli.StringFlag{Name: "log-format", Value: "console", Usage: "console or json", EnvVars: []string{"GPUD_LOG_FORMAT"}},
		},
		Before: func(c *cli.Context) error {
			logger, err := newLogger(c.String("log-level"), c.String("log-format"), stderr)
			if err != nil {
				return usageError(err)
			}
			c.Context = logger.WithContext(c.Context)
			return nil
		},
		OnUsageError: onUsageError,
		// Errors are printed once, by exitCode, not by the library.
		ExitErrHandler: func(*cli.Context, error) {},
		Commands:       commands(),
	}
	// Setup adds the help command, so that a wrong flag of gpud help is a
	// usage error too; it is one command shared by every level (gpud admin help).
	app.Setup()
	for _, cmd := range app.Commands {
		setUsageErrors(cmd)
	}
	return app
}

// commands lists every registered command. A command is listed only once it works.
func commands() []*cli.Command {
	return []*cli.Command{
		agentCommand(),
		simCommand(),
		validateCommand(),
		serveCommand(),
		runCommand(),
		applyCommand(),
		psCommand(),
		logsCommand(),
		stopCommand(),
		attachCommand(),
		sshConfigCommand(),
		sshProxyCommand(),
		queueCommand(),
		volumeCommand(),
		offerCommand(),
		secretCommand(),
		eventsCommand(),
		loginCommand(),
		adminCommand(),
		fleetCommand(),
		gatewayCommand(),
		serviceCommand(),
		backendCommand(),
		pluginCommand(),
		projectCommand(),
		userCommand(),
		deleteCommand(),
		completionCommand(),
	}
}

// setUsageErrors makes a flag the command line cannot parse a usageErr, in
// cmd and every command below it. The help command is one value shared by
// every level, and lists itself as its own subcommand once it ran.
func setUsageErrors(cmd *cli.Command) {
	seen := map[*cli.Command]bool{}
	var walk func(*cli.Command)
	walk = func(cmd *cli.Command) {
		if seen[cmd] {
			return
		}
		seen[cmd] = true
		cmd.OnUsageError = onUsageError
		for _, sub := range cmd.Subcommands {
			walk(sub)
		}
	}
	walk(cmd)
}

// onUsageError is every command's OnUsageError: a wrong flag is a usageErr.
func onUsageError(_ *cli.Context, err error, _ bool) error { return usageError(err) }

// newLogger builds the one zerolog logger of the process; commands take it
// from their context with zerolog.Ctx.
func newLogger(level, format string, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || lvl == zerolog.NoLevel {
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	switch format {
	case "json":
	case "console":
		// Colours only for a person at a terminal: not in a file, a pipe or
		// a journal, nor with NO_COLOR set (no-color.org).
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !colorTerminal(w, os.Getenv)}
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format %q: use console or json", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}
