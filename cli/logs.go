package cli

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// logsCommand prints a run's output, following it with -f.
func logsCommand() *cli.Command {
	return &cli.Command{
		Name:      "logs",
		Usage:     "print a run's output; -f follows it until the run finishes",
		ArgsUsage: "RUN",
		Flags: clientFlags(
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep streaming until every job of the run finished"},
			&cli.StringFlag{Name: "job", Usage: "only this job id (see gpud ps --json)"},
			&cli.IntFlag{Name: "attempt", Usage: "the output of attempt `N` of a retried run, counted from 1 (default: the latest)"},
			&cli.BoolFlag{Name: "json", Usage: "print each line as a JSON object (job, offset, time, stream, line; partial on a piece of a line over 16 MiB, dropped on a marker for output not kept), one per line"},
		),
		Action: func(c *cli.Context) error {
			name, err := oneArg(c, "run")
			if err != nil {
				return err
			}
			if c.Int("attempt") < 0 {
				return fmt.Errorf("--attempt %d: attempts are counted from 1", c.Int("attempt"))
			}
			cl, t, err := connect(c)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(c.App.Writer)
			enc.SetEscapeHTML(false)
			err = cl.RunLogs(c.Context, t.Project, name, api.LogOptions{Follow: c.Bool("follow"), Job: c.String("job"), Attempt: c.Int("attempt")}, func(e api.LogEntry) error {
				if c.Bool("json") {
					return enc.Encode(e)
				}
				writeLogLine(c.App.Writer, c.App.ErrWriter, e)
				return nil
			})
			if err != nil {
				return fmt.Errorf("logs %s: %w", name, err)
			}
			return nil
		},
	}
}
