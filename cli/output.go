package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// jsonFlag returns the --json flag of every command that prints a listing
// (a new one each time: urfave/cli records parse state in the flag value).
func jsonFlag() cli.Flag { return &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"} }

// printJSON writes v as indented JSON with a trailing newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("print JSON: %w", err)
	}
	return nil
}

// writeLogLine prints a job's line to stdout or stderr as the job wrote it:
// the piece of a line longer than api.MaxLogLine without a newline, so the
// pieces join into the line. A marker for output the server no longer has
// (e.Dropped) is printed like a line, on its stream.
func writeLogLine(stdout, stderr io.Writer, e api.LogEntry) {
	w := stdout
	if e.Stream == api.LogStderr {
		w = stderr
	}
	if e.Partial {
		fmt.Fprint(w, e.Line)
		return
	}
	fmt.Fprintln(w, e.Line)
}
