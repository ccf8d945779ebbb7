package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/sched/scenario"
)

// simCommand runs the scheduler offline on a scenario file: the same code
// the server runs, with the --json output as a contract.
func simCommand() *cli.Command {
	return &cli.Command{
		Name:      "sim",
		Usage:     "run the scheduler on a scenario file and show placements, evictions, fair shares and why jobs wait",
		ArgsUsage: "SCENARIO.yml",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the state after the last cycle as JSON"},
			&cli.BoolFlag{Name: "cycles", Usage: "with --json, print a list of states, one after each cycle"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError(fmt.Errorf("sim takes one scenario file"))
			}
			s, err := scenario.LoadFile(c.Args().First())
			if err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			res := scenario.Run(s)
			out := c.App.Writer
			if c.Bool("json") {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if c.Bool("cycles") {
					return enc.Encode(res.Cycles)
				}
				return enc.Encode(res.Final)
			}
			if err := scenario.WriteText(out, res); err != nil {
				return fmt.Errorf("sim: %w", err)
			}
			if diffs := scenario.CheckRun(s, res); len(diffs) > 0 {
				return invalidInput(errors.New(strings.Join(diffs, "\n")))
			} else if s.HasExpect {
				fmt.Fprintln(out, "expect: ok")
			}
			return nil
		},
	}
}
