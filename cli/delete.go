package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// deleteCommand deletes finished runs' records, with their jobs and logs.
func deleteCommand() *cli.Command {
	return &cli.Command{
		Name:      "delete",
		Usage:     "delete finished runs: their records, jobs and logs (gpud stop a run first)",
		UsageText: "gpud delete [--yes] [--json] RUN...\ngpud delete --all-finished [--yes] [--json]",
		Description: `Deletes every record of each named run: a run applied again under its name leaves its
earlier, finished records, and they go too. A run that is not finished is refused by name
(stop it first: gpud stop RUN); nothing is deleted then. Once its record is gone, a run no
longer keeps its host: the fleet can be deleted. A service's keys go with its last record
(only its submitter or a project manager may delete it then).

Any member of the project may delete its finished runs, as any member may stop them.
gpud asks before deleting, unless --yes; with stdin not a terminal, --yes is required.

Examples:
   gpud stop train          # then, once gpud ps -a shows it terminated:
   gpud delete train
   gpud delete --yes eval-1 eval-2
   gpud delete --all-finished --project research`,
		Flags: clientFlags(
			&cli.BoolFlag{Name: "all-finished", Usage: "delete every finished run of the project"},
			&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask"},
			jsonFlag(),
		),
		Action:       deleteRuns,
		BashComplete: completeFinishedRuns,
	}
}

// completeFinishedRuns completes gpud delete: its flags after a dash,
// else the project's finished runs not named yet (nothing when no server
// answers within two seconds).
func completeFinishedRuns(c *cli.Context) {
	if n := len(os.Args); n > 2 && strings.HasPrefix(os.Args[n-2], "-") {
		cli.DefaultCompleteWithFlags(c.Command)(c)
		return
	}
	cl, t, err := connect(c)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(c.Context, 2*time.Second)
	defer cancel()
	runs, err := cl.ListRuns(ctx, t.Project, true)
	if err != nil {
		return
	}
	seen := map[string]bool{}
	for _, a := range c.Args().Slice() {
		seen[a] = true
	}
	for _, r := range runs {
		if r.Finished() && !seen[r.Name] {
			seen[r.Name] = true
			fmt.Fprintln(c.App.Writer, r.Name)
		}
	}
}

func deleteRuns(c *cli.Context) error {
	names := c.Args().Slice()
	for i, a := range names {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			return usageError(fmt.Errorf("delete: flag %s after %s — put flags before the runs, like gpud delete %s %s",
				a, strings.Join(names[:i], " "), strings.Join(names[i:], " "), strings.Join(names[:i], " ")))
		}
	}
	all := c.Bool("all-finished")
	switch {
	case all && len(names) > 0:
		return usageError(errors.New("delete: give run names or --all-finished, not both"))
	case !all && len(names) == 0:
		return usageError(errors.New("delete: give at least one run name, like gpud delete RUN, or --all-finished"))
	}
	cl, t, err := connect(c)
	if err != nil {
		return err
	}
	runs, err := cl.ListRuns(c.Context, t.Project, true)
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	doomed, err := runsToDelete(runs, names, all, t.Project)
	if err != nil {
		return err
	}
	if len(doomed) == 0 {
		if c.Bool("json") {
			return printJSON(c.App.Writer, []api.Run{})
		}
		fmt.Fprintf(c.App.ErrWriter, "no finished runs in project %s\n", t.Project)
		return nil
	}
	if !c.Bool("yes") {
		if !stdinIsTerminal() {
			return usageError(errors.New("delete: stdin is not a terminal, so gpud cannot ask [y/n] — pass --yes to delete without asking"))
		}
		if !ask(c.App.ErrWriter, fmt.Sprintf("Delete %s of project %s, with their logs?", describeRuns(doomed), t.Project)) {
			fmt.Fprintln(c.App.ErrWriter, "nothing deleted")
			return nil
		}
	}
	deleted := []api.Run{}
	var failed []string
	for _, r := range doomed {
		// By id: a name may also be a newer, active run's.
		if err := cl.DeleteRun(c.Context, t.Project, r.ID); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", r.Name, err))
			continue
		}
		deleted = append(deleted, r)
		if !c.Bool("json") {
			fmt.Fprintf(c.App.Writer, "run %s deleted (%s)\n", r.Name, r.Status)
		}
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, deleted); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("delete: %d of %d not deleted:\n  %s", len(failed), len(doomed), strings.Join(failed, "\n  "))
	}
	return nil
}

// runsToDelete picks the records to delete: every finished run (all), or
// every record of each name. A name with no record, or with a record that
// is not finished, refuses the whole command, listing each such name.
func runsToDelete(runs []api.Run, names []string, all bool, project string) ([]api.Run, error) {
	var out []api.Run
	if all {
		for _, r := range runs {
			if r.Finished() {
				out = append(out, r)
			}
		}
		return out, nil
	}
	var problems []string
	seen := map[string]bool{}
	for _, name := range names {
		if seen[name] {
			continue
		}
		seen[name] = true
		var recs []api.Run
		active := ""
		for _, r := range runs {
			if r.Name != name && r.ID != name {
				continue
			}
			recs = append(recs, r)
			if !r.Finished() {
				active = r.Status
			}
		}
		switch {
		case len(recs) == 0:
			problems = append(problems, fmt.Sprintf("no run %s in project %s (gpud ps -a lists them)", name, project))
		case active != "":
			problems = append(problems, fmt.Sprintf("run %s is %s, not finished: stop it first (gpud stop %s), then delete it", name, active, name))
		default:
			out = append(out, recs...)
		}
	}
	if len(problems) > 0 {
		return nil, invalidInputf("gpud delete: nothing deleted:\n  %s", strings.Join(problems, "\n  "))
	}
	return out, nil
}

// describeRuns is "run a" or "3 runs (a, b, c)", names deduplicated.
func describeRuns(runs []api.Run) string {
	var names []string
	seen := map[string]bool{}
	for _, r := range runs {
		if !seen[r.Name] {
			seen[r.Name] = true
			names = append(names, r.Name)
		}
	}
	sort.Strings(names)
	if len(runs) == 1 {
		return "run " + names[0]
	}
	if len(names) > 10 {
		names = append(names[:10], "…")
	}
	return fmt.Sprintf("%d runs (%s)", len(runs), strings.Join(names, ", "))
}
