package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// Exit codes shared by every command (docs/cli.md). gpud run exits with its
// task's own code instead (jobExitErr).
const (
	exitInvalidInput = 1   // the input was read and is wrong
	exitUsage        = 2   // the command line itself is wrong
	exitInterrupted  = 130 // gpud run: the user left with a second Ctrl-C
)

// A command says which exit code it ends with by the type of the error it
// returns; exitCode finds the type with errors.As, never by the error's text:
//
//	usageErr         the command line is wrong: exit 2, printed "gpud: <err>"
//	invalidInputErr  the input was read and is wrong: exit 1, printed as is
//	jobExitErr       a code of its own (a job's, 130): printed as is, if any
//
// Any other error is a failure to do the work (a server that does not answer,
// a disk that is full): exit 1, printed "gpud: <err>".

// usageErr marks an error in the command line itself (exit code 2).
type usageErr struct{ error }

func (e usageErr) Unwrap() error { return e.error }

// usageError marks err as a usage error: exit code 2.
func usageError(err error) error { return usageErr{err} }

// invalidInputErr is input that was read and is wrong (exit code 1): an
// invalid configuration, a scenario whose expectations fail. Its message
// names the command itself ("gpud validate: ..."), so it is printed as is,
// after whatever detail (positions, carets, fixes) the command printed.
type invalidInputErr struct{ error }

func (e invalidInputErr) Unwrap() error { return e.error }

// invalidInput marks err as invalid input: exit code 1.
func invalidInput(err error) error { return invalidInputErr{err} }

// invalidInputf is invalidInput(fmt.Errorf(format, args...)).
func invalidInputf(format string, args ...any) error {
	return invalidInputErr{fmt.Errorf(format, args...)}
}

// jobExitErr ends gpud with a code of its own: the exit code of gpud run's
// job (or of the job the agent's shim ran), or exitInterrupted. msg, when
// not empty, is printed as is.
type jobExitErr struct {
	code int
	msg  string
}

func (e *jobExitErr) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.msg
}

// exitWith returns the error that makes gpud exit with code, printing msg.
func exitWith(code int, msg string) error { return &jobExitErr{code: code, msg: msg} }

// exitCode prints err once and maps it to the process exit code.
func exitCode(err error, stderr io.Writer) int {
	var (
		ue usageErr
		ie invalidInputErr
		je *jobExitErr
		ec cli.ExitCoder // urfave/cli's own, like exit 3 for gpud help NOSUCHCOMMAND
	)
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "gpud: %v\n", ue.error)
		return exitUsage
	case errors.As(err, &ie):
		fmt.Fprintln(stderr, ie.Error())
		return exitInvalidInput
	case errors.As(err, &je):
		if je.msg != "" {
			fmt.Fprintln(stderr, je.msg)
		}
		return je.code
	case errors.As(err, &ec):
		if msg := strings.TrimSpace(fmt.Sprint(err)); msg != "" {
			fmt.Fprintln(stderr, msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintf(stderr, "gpud: %v\n", err)
	return exitInvalidInput
}

// requireFlags is a usage error unless every named flag is set (on the
// command line or through its environment variable); like urfave/cli's
// Required, it shows the command's help first. gpud checks it itself so
// that the error is a usageErr, not the library's unexported type.
func requireFlags(c *cli.Context, names ...string) error {
	var missing []string
	for _, n := range names {
		if !c.IsSet(n) {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	cli.HelpPrinter(c.App.Writer, cli.CommandHelpTemplate, c.Command)
	if len(missing) == 1 {
		return usageError(fmt.Errorf("Required flag %q not set", missing[0]))
	}
	return usageError(fmt.Errorf("Required flags %q not set", strings.Join(missing, ", ")))
}
