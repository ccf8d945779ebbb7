package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// queueCommand lists, applies and deletes scheduling queues.
func queueCommand() *cli.Command {
	return &cli.Command{
		Name:  "queue",
		Usage: "list queues with fair share, allocation and usage; apply or delete them",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the project's queues: quota, limit, fair share, allocated, usage, pending and running jobs",
				Flags: clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					qs, err := cl.ListQueues(c.Context, t.Project)
					if err != nil {
						return fmt.Errorf("queue list: %w", err)
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, qs)
					}
					return printQueues(c.App.Writer, qs)
				},
			},
			{
				Name:      "apply",
				Usage:     "create or update queues from type: queue files (same as gpud apply)",
				ArgsUsage: "FILE...",
				Flags:     clientFlags(jsonFlag()),
				Action:    runApply,
			},
			{
				Name:      "delete",
				Usage:     "delete queues that no run uses",
				ArgsUsage: "QUEUE...",
				Flags:     clientFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() == 0 {
						return usageError(fmt.Errorf("queue delete: give at least one queue name"))
					}
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					for _, q := range c.Args().Slice() {
						if err := cl.DeleteQueue(c.Context, t.Project, q); err != nil {
							return fmt.Errorf("queue delete %s: %w", q, err)
						}
						fmt.Fprintf(c.App.Writer, "queue %s deleted\n", q)
					}
					return nil
				},
			},
		},
	}
}

// printQueues writes one row per queue; amounts are "gpu/cpu/memory".
func printQueues(w io.Writer, qs []api.Queue) error {
	if len(qs) == 0 {
		fmt.Fprintln(w, "no queues")
		return nil
	}
	fmt.Fprintln(w, "amounts are gpu/cpu/memory; usage is decayed gpu-hours/cpu-hours")
	t := newTable(w, "NAME", "PARENT", "PRIORITY", "QUOTA", "LIMIT", "FAIR SHARE", "ALLOCATED", "USAGE", "PENDING", "RUNNING")
	for _, q := range qs {
		t.row(q.Name, orDash(q.Parent), fmt.Sprint(q.Priority), amounts(q.Quota), amounts(q.Limit), amounts(q.FairShare), amounts(q.Allocated), usage(q.Usage), fmt.Sprint(q.Pending), fmt.Sprint(q.Running))
	}
	return t.flush()
}

// amounts formats queue amounts as "gpu/cpu/memory", like "2/8/32GB";
// -1 (no limit) is "∞".
func amounts(a api.QueueAmounts) string {
	one := func(v float64, mem bool) string {
		switch {
		case v < 0:
			return "∞"
		case mem:
			return humanSize(api.Size(v))
		}
		return fmt.Sprintf("%.3g", v)
	}
	return strings.Join([]string{one(a.GPU, false), one(a.CPU, false), one(a.Memory, true)}, "/")
}

// usage formats decayed historical use as "gpu-hours/cpu-hours".
func usage(a api.QueueAmounts) string {
	return fmt.Sprintf("%.3g/%.3g", a.GPU, a.CPU)
}
