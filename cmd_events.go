package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// eventsCommand prints recorded transitions with their reasons.
func eventsCommand() *cli.Command {
	return &cli.Command{
		Name:      "events",
		Usage:     "print recorded state changes with their reasons: the project's, or one run's",
		ArgsUsage: "[RUN]",
		Flags: clientFlags(
			&cli.StringFlag{Name: "after", Usage: "only events after this event id"},
			&cli.IntFlag{Name: "limit", Usage: "at most this many project events (default: the server's)"},
			jsonFlag,
		),
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usageError(fmt.Errorf("events: give at most one run name"))
			}
			cl, t, err := connect(c)
			if err != nil {
				return err
			}
			var es []api.Event
			if run := c.Args().First(); run != "" {
				es, err = cl.RunEvents(c.Context, t.Project, run, c.String("after"))
			} else {
				es, err = cl.Events(c.Context, t.Project, c.String("after"), c.Int("limit"))
			}
			if err != nil {
				return fmt.Errorf("events: %w", err)
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, es)
			}
			tb := newTable(c.App.Writer, "TIME", "KIND", "SUBJECT", "STATUS", "REASON")
			for _, e := range es {
				tb.row(e.Time.Local().Format(time.DateTime), e.Kind, e.Subject, e.Status, orDash(e.Reason))
			}
			return tb.flush()
		},
	}
}
