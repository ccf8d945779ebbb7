// Package cli is gpud's command line: the server (gpud serve), the host
// agent (gpud agent) and the client commands (gpud run, validate, ...).
//
// It only parses flags and calls into the packages below it; it holds no
// business logic. Each command lives in its own file, named after it.
package cli

import (
	"errors"
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

// Exit codes shared by every command.
const (
	exitInvalidInput = 1 // the input was read and is wrong
	exitUsage        = 2 // the command line itself is wrong
)

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
		OnUsageError: func(_ *cli.Context, err error, _ bool) error { return usageError(err) },
		// Errors are printed once, by exitCode, not by the library.
		ExitErrHandler: func(*cli.Context, error) {},
		Commands:       commands(),
	}
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
		queueCommand(),
		offerCommand(),
		secretCommand(),
		eventsCommand(),
		loginCommand(),
		adminCommand(),
		fleetCommand(),
	}
}

func setUsageErrors(cmd *cli.Command) {
	cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return usageError(err) }
	for _, sub := range cmd.Subcommands {
		setUsageErrors(sub)
	}
}

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
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format %q: use console or json", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// usageErr marks an error in the command line itself (exit code 2).
type usageErr struct{ error }

func usageError(err error) error { return usageErr{err} }

// exitCode prints err once and maps it to the process exit code.
func exitCode(err error, stderr io.Writer) int {
	var ue usageErr
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "gpud: %v\n", ue.error)
		return exitUsage
	}
	if ec, ok := err.(cli.ExitCoder); ok {
		if msg := strings.TrimSpace(fmt.Sprint(err)); msg != "" {
			fmt.Fprintln(stderr, msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintf(stderr, "gpud: %v\n", err)
	if strings.Contains(err.Error(), "flag provided but not defined") || strings.Contains(err.Error(), "Required flag") {
		return exitUsage
	}
	return exitInvalidInput
}
