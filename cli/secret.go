package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// secretCommand manages project secrets, referenced as ${{ secrets.NAME }}.
func secretCommand() *cli.Command {
	return &cli.Command{
		Name:  "secret",
		Usage: "set, get, list and delete project secrets (used as ${{ secrets.NAME }})",
		Subcommands: []*cli.Command{
			{
				Name:      "set",
				Usage:     "create or replace a secret; the value is read from stdin when not given (so it stays out of shell history)",
				ArgsUsage: "NAME [VALUE]",
				Flags:     clientFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() < 1 || c.NArg() > 2 {
						return usageError(errors.New("secret set: give NAME and optionally VALUE, like gpud secret set HF_TOKEN < token.txt"))
					}
					name, value := c.Args().Get(0), c.Args().Get(1)
					if c.NArg() == 1 {
						b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
						if err != nil {
							return fmt.Errorf("secret set: read the value from stdin: %w", err)
						}
						value = strings.TrimRight(string(b), "\r\n")
					}
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					if _, err := cl.SetSecret(c.Context, t.Project, name, value); err != nil {
						return fmt.Errorf("secret set %s: %w", name, err)
					}
					fmt.Fprintf(c.App.ErrWriter, "secret %s set\n", name)
					return nil
				},
			},
			{
				Name:      "get",
				Usage:     "print a secret's value (managers and admins)",
				ArgsUsage: "NAME",
				Flags:     clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					name, err := oneArg(c, "name")
					if err != nil {
						return err
					}
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					s, err := cl.GetSecret(c.Context, t.Project, name)
					if err != nil {
						return fmt.Errorf("secret get %s: %w", name, err)
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, s)
					}
					if s.Value != nil {
						fmt.Fprintln(c.App.Writer, *s.Value)
					}
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list secret names (never values)",
				Flags: clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					ss, err := cl.ListSecrets(c.Context, t.Project)
					if err != nil {
						return fmt.Errorf("secret list: %w", err)
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, ss)
					}
					tb := newTable(c.App.Writer, "NAME", "UPDATED")
					now := time.Now()
					for _, s := range ss {
						tb.row(s.Name, ago(now, s.UpdatedAt))
					}
					return tb.flush()
				},
			},
			{
				Name:      "delete",
				Usage:     "delete secrets",
				ArgsUsage: "NAME...",
				Flags:     clientFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() == 0 {
						return usageError(errors.New("secret delete: give at least one secret name"))
					}
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					for _, name := range c.Args().Slice() {
						if err := cl.DeleteSecret(c.Context, t.Project, name); err != nil {
							return fmt.Errorf("secret delete %s: %w", name, err)
						}
						fmt.Fprintf(c.App.ErrWriter, "secret %s deleted\n", name)
					}
					return nil
				},
			},
		},
	}
}
