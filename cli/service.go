package cli

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"
)

// serviceCommand manages what belongs to a service beyond its run: its
// per-service keys (docs/gateway.md#auth).
func serviceCommand() *cli.Command {
	return &cli.Command{
		Name:  "service",
		Usage: "manage services' per-service keys (a bearer key that opens one service of the project and nothing else)",
		Subcommands: []*cli.Command{{
			Name:  "key",
			Usage: "create, list and revoke a service's keys",
			Description: "A key opens the service RUN (every run of that name in the project: it survives a re-apply\n" +
				"or rolling update) at its gateway address, sent as Authorization: Bearer <key>. It opens no\n" +
				"other service, not the API, not the project's model endpoint. The server keeps only its\n" +
				"SHA-256: the key is printed once, at creation. The run's submitter or a project manager\n" +
				"creates and revokes keys; a key stops working when its maker leaves the project.",
			Subcommands: []*cli.Command{
				{
					Name:      "create",
					Usage:     "make a key for a service and print it (once: it cannot be shown again)",
					ArgsUsage: "RUN",
					Flags:     clientFlags(jsonFlag(), &cli.StringFlag{Name: "name", Usage: "the key's name (default key-<8 hex>)"}),
					Action: func(c *cli.Context) error {
						run, err := oneArg(c, "run")
						if err != nil {
							return err
						}
						cl, t, err := connect(c)
						if err != nil {
							return err
						}
						k, err := cl.CreateServiceKey(c.Context, t.Project, run, c.String("name"))
						if err != nil {
							return serverError("service key create", err, c.App.ErrWriter)
						}
						if c.Bool("json") {
							return printJSON(c.App.Writer, k)
						}
						fmt.Fprintln(c.App.Writer, k.Key)
						fmt.Fprintf(c.App.ErrWriter, "key %s of service %s (project %s): shown this once; send it as Authorization: Bearer <key>\n", k.Name, k.Run, k.Project)
						return nil
					},
				},
				{
					Name:      "list",
					Usage:     "list a service's keys: names, who made them, when, last use (never the keys)",
					ArgsUsage: "RUN",
					Flags:     clientFlags(jsonFlag()),
					Action: func(c *cli.Context) error {
						run, err := oneArg(c, "run")
						if err != nil {
							return err
						}
						cl, t, err := connect(c)
						if err != nil {
							return err
						}
						ks, err := cl.ListServiceKeys(c.Context, t.Project, run)
						if err != nil {
							return serverError("service key list", err, c.App.ErrWriter)
						}
						if c.Bool("json") {
							return printJSON(c.App.Writer, ks)
						}
						tb := newTable(c.App.Writer, "NAME", "CREATED BY", "CREATED", "LAST USED")
						now := time.Now()
						for _, k := range ks {
							used := "never"
							if k.LastUsedAt != nil {
								used = ago(now, *k.LastUsedAt)
							}
							tb.row(k.Name, k.CreatedBy, ago(now, k.CreatedAt), used)
						}
						return tb.flush()
					},
				},
				{
					Name:      "revoke",
					Usage:     "revoke a service's key: the next request with it gets 401",
					ArgsUsage: "RUN NAME",
					Flags:     clientFlags(),
					Action: func(c *cli.Context) error {
						if c.NArg() != 2 {
							return usageError(fmt.Errorf("service key revoke: give RUN and NAME, like gpud service key revoke web ci"))
						}
						run, name := c.Args().Get(0), c.Args().Get(1)
						cl, t, err := connect(c)
						if err != nil {
							return err
						}
						if err := cl.RevokeServiceKey(c.Context, t.Project, run, name); err != nil {
							return serverError("service key revoke", err, c.App.ErrWriter)
						}
						fmt.Fprintf(c.App.ErrWriter, "key %s of service %s revoked\n", name, run)
						return nil
					},
				},
			},
		}},
	}
}
