package cli

import (
	"fmt"
	"strings"
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
			jsonFlag(),
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
			names := runNames(c, cl, t.Project)
			tb := newTable(c.App.Writer, "TIME", "KIND", "SUBJECT", "STATUS", "REASON")
			for _, e := range es {
				tb.row(e.Time.Local().Format(time.DateTime), e.Kind, names.subject(e), e.Status, orDash(e.Reason))
			}
			return tb.flush()
		},
	}
}

// runNameIndex maps run ids to names so events read "train-0-0", not ids.
type runNameIndex map[string]string

// runNames lists the project's runs (finished ones too); on error the
// table shows ids, which is still correct.
func runNames(c *cli.Context, cl *api.Client, project string) runNameIndex {
	runs, err := cl.ListRuns(c.Context, project, true)
	if err != nil {
		return nil
	}
	idx := runNameIndex{}
	for _, r := range runs {
		idx[r.ID] = r.Name
	}
	return idx
}

// subject names a run or job event as the server names it, else by the
// run's name ("<run id>-0-0" becomes "<run name>-0-0"); other subjects
// are unchanged.
func (idx runNameIndex) subject(e api.Event) string {
	if e.Name != "" {
		return e.Name // the server's name for it (run, job with its attempt)
	}
	if e.Kind != "runs" && e.Kind != "jobs" {
		return e.Subject
	}
	id, rest, _ := strings.Cut(e.Subject, "-")
	if name, ok := idx[id]; ok {
		if rest != "" {
			return name + "-" + rest
		}
		return name
	}
	return e.Subject
}
