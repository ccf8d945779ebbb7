package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// stopCommand stops runs.
func stopCommand() *cli.Command {
	return &cli.Command{
		Name:      "stop",
		Usage:     "stop runs: SIGTERM, then SIGKILL after their stop_duration; --abort kills at once",
		ArgsUsage: "RUN...",
		Flags: clientFlags(
			&cli.BoolFlag{Name: "abort", Aliases: []string{"x"}, Usage: "skip the stop_duration grace period; jobs end as aborted"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return usageError(fmt.Errorf("stop: give at least one run name, like gpud stop RUN"))
			}
			cl, t, err := connect(c)
			if err != nil {
				return err
			}
			for _, name := range c.Args().Slice() {
				run, err := cl.StopRun(c.Context, t.Project, name, c.Bool("abort"))
				if err != nil {
					return fmt.Errorf("stop %s: %w", name, err)
				}
				fmt.Fprintf(c.App.Writer, "%s: %s\n", run.Name, statusText(run.Status, run.Reason, ""))
			}
			return nil
		},
	}
}
