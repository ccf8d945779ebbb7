package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// psCommand lists the project's runs with their jobs and why they wait.
func psCommand() *cli.Command {
	return &cli.Command{
		Name:  "ps",
		Usage: "list runs and their jobs, with why each waiting job is pending",
		Flags: clientFlags(
			&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "include finished runs"},
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "redraw every second until Ctrl-C"},
			jsonFlag(),
		),
		Action: func(c *cli.Context) error {
			cl, t, err := connect(c)
			if err != nil {
				return err
			}
			show := func(ctx context.Context, w io.Writer) error {
				runs, err := cl.ListRuns(ctx, t.Project, c.Bool("all"))
				if err != nil {
					return fmt.Errorf("ps: %w", err)
				}
				if c.Bool("json") {
					return printJSON(w, runs)
				}
				return printRuns(w, runs, time.Now())
			}
			if !c.Bool("watch") {
				return show(c.Context, c.App.Writer)
			}
			return watch(c.Context, c.App.Writer, time.Second, show)
		},
	}
}

// watch redraws show's output every interval until ctx ends or a signal
// arrives; each frame replaces the previous one on a terminal. Written to
// a file or a pipe, frames follow each other under a line with their time,
// with no terminal codes.
func watch(ctx context.Context, w io.Writer, every time.Duration, show func(context.Context, io.Writer) error) error {
	sigs, stop := interrupts()
	defer stop()
	t := time.NewTicker(every)
	defer t.Stop()
	tty := isTerminal(w)
	for {
		var frame strings.Builder
		if err := show(ctx, &frame); err != nil {
			return err
		}
		if tty {
			fmt.Fprint(w, "\033[H\033[2J"+frame.String())
		} else {
			fmt.Fprintf(w, "--- %s\n%s", time.Now().Format(time.RFC3339), frame.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sigs:
			return nil
		case <-t.C:
		}
	}
}

// printRuns writes one row per run, and one per job under multi-job runs.
// A waiting run shows the scheduler's reason in the STATUS column.
func printRuns(w io.Writer, runs []api.Run, now time.Time) error {
	if len(runs) == 0 {
		fmt.Fprintln(w, "no runs (gpud ps -a includes finished ones)")
		return nil
	}
	t := newTable(w, "NAME", "TYPE", "QUEUE", "RESOURCES", "INSTANCE", "STATUS", "SUBMITTED", "EXIT", "COST")
	for _, r := range runs {
		var res, inst string
		if len(r.Jobs) > 0 {
			res, inst = jobResources(r.Jobs[0].Resources), r.Jobs[0].Instance
		}
		t.row(r.Name, string(r.Type), orDash(r.Queue), orDash(res), orDash(inst), statusText(r.Status, r.Reason, r.WhyPending), ago(now, r.SubmittedAt), exitText(r.ExitCode), costText(r.Cost))
		if len(r.Jobs) < 2 {
			continue
		}
		for _, j := range r.Jobs {
			status := statusText(j.Status, j.Reason, j.WhyPending)
			if j.Ready != nil && !*j.Ready {
				status += " (not ready: its probes have not passed, or it is being replaced)"
			}
			t.row("  "+j.Name, "", "", jobResources(j.Resources), orDash(j.Instance), status, ago(now, j.SubmittedAt), exitText(j.ExitCode), costText(j.Cost))
		}
	}
	return t.flush()
}

// statusText is a status with why it waits or why it ended.
func statusText(status, reason, whyPending string) string {
	switch {
	case whyPending != "":
		return status + " — " + whyPending
	case reason != "" && status != "running":
		return status + " (" + reason + ")"
	}
	return status
}

// costText is a run's cost so far: "-" when it ran only on own hosts.
func costText(c float64) string {
	switch {
	case c <= 0:
		return "-"
	case c < 0.005:
		return "<$0.01"
	}
	return fmt.Sprintf("$%.2f", c)
}

func exitText(code *int) string {
	if code == nil {
		return "-"
	}
	return fmt.Sprint(*code)
}

// jobResources formats what a job was scheduled with, its GPUs as the
// configuration says them: "0.5×H100 4cpu 16GB", "1×GPU:16GB..24GB 2cpu",
// "2×H100|A100".
func jobResources(r api.JobRequest) string {
	var parts []string
	if r.GPU > 0 {
		name := strings.ReplaceAll(r.GPUName, ",", "|")
		if name == "" {
			name = "GPU"
		}
		g := fmt.Sprintf("%g×%s", r.GPU, name)
		switch {
		case r.GPUMemoryMax > 0 && r.GPUMemoryMax != r.GPUMemory:
			lo := ""
			if r.GPUMemory > 0 {
				lo = humanSize(r.GPUMemory)
			}
			g += ":" + lo + ".." + humanSize(r.GPUMemoryMax)
		case r.GPUMemory > 0:
			g += ":" + humanSize(r.GPUMemory)
		}
		parts = append(parts, g)
	}
	if r.CPU > 0 {
		parts = append(parts, fmt.Sprintf("%gcpu", r.CPU))
	}
	if r.Memory > 0 {
		parts = append(parts, humanSize(r.Memory))
	}
	return strings.Join(parts, " ")
}

// instanceResources formats a host's capacity: "8×H100:80GB 224cpu 2TB disk 30TB".
func instanceResources(r api.InstanceResources) string {
	var parts []string
	if r.GPUs > 0 {
		name := r.GPUName
		if name == "" {
			name = "GPU"
		}
		g := fmt.Sprintf("%g×%s", r.GPUs, name)
		if r.GPUMemory > 0 {
			g += ":" + humanSize(r.GPUMemory)
		}
		parts = append(parts, g)
	}
	parts = append(parts, fmt.Sprintf("%gcpu", r.CPUs), humanSize(r.Memory))
	if r.Disk > 0 {
		parts = append(parts, "disk "+humanSize(r.Disk))
	}
	return strings.Join(parts, " ")
}
