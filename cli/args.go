package cli

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// oneArg returns the single positional argument or a usage error naming it.
func oneArg(c *cli.Context, what string) (string, error) {
	for _, a := range c.Args().Tail() {
		if strings.HasPrefix(a, "-") {
			// urfave/cli stops reading flags at the first argument.
			return "", usageError(fmt.Errorf("%s: flag %s after %s — put flags before it, like gpud %s %s %s", c.Command.FullName(), a, strings.ToUpper(what), c.Command.FullName(), a, c.Args().First()))
		}
	}
	if c.NArg() != 1 {
		return "", usageError(fmt.Errorf("%s: give exactly one %s, like gpud %s %s", c.Command.FullName(), what, c.Command.FullName(), strings.ToUpper(what)))
	}
	return c.Args().First(), nil
}
