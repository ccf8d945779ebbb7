package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/clientconf"
)

// userCommand manages the server's users and their API tokens.
func userCommand() *cli.Command {
	return &cli.Command{
		Name:  "user",
		Usage: "list, create and delete users; rotate API tokens",
		Description: `Users log in with an API token (gpud login --url URL --token TOKEN). The server keeps only a
token's hash, so a token is printed once, when it is made: by gpud user create, or by
gpud user token, which replaces the old one. A global admin manages every user; a user may
rotate their own token.

Examples:
   gpud user create alice                    # prints alice's token on stdout, once
   gpud user create --global-admin ops
   gpud project member add research alice    # users reach projects as members
   gpud user list
   gpud user token                           # a new token for yourself; the old one stops working
   gpud user token alice                     # (global admins) a new token for alice
   gpud user delete alice`,
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list users and their global role (global admins)",
				UsageText: "gpud user list [--json]",
				Flags:     serverFlags(jsonFlag()),
				Action:    userList,
			},
			{
				Name:      "create",
				Usage:     "create a user and print its API token, once, on stdout (global admins)",
				UsageText: "gpud user create [--global-admin] [--json] NAME",
				Description: `The token is the only line on stdout (the rest goes to stderr), so it can be captured:
   TOKEN=$(gpud user create alice)
The new user is a member of no project: add them with gpud project member add PROJECT NAME.`,
				Flags: serverFlags(
					&cli.BoolFlag{Name: "global-admin", Usage: "make the user a global admin: every project, every role, users and projects"},
					jsonFlag()),
				Action: userCreate,
			},
			{
				Name:      "delete",
				Usage:     "delete users and their memberships (global admins; not yourself)",
				UsageText: "gpud user delete NAME...",
				Flags:     serverFlags(),
				Action:    userDelete,
			},
			{
				Name:      "token",
				Usage:     "issue a new API token (yours, or NAME's for global admins); the old one stops working at once",
				UsageText: "gpud user token [--json] [NAME]",
				Description: `The new token is the only line on stdout, printed once. Every client still using the old one
(a gpud login entry, GPUD_TOKEN, scripts) gets 401 until it is given the new one.`,
				Flags:  serverFlags(jsonFlag()),
				Action: userToken,
			},
		},
	}
}

func userList(c *cli.Context) error {
	if _, err := posArgs(c); err != nil {
		return err
	}
	cl, _, err := connect(c)
	if err != nil {
		return err
	}
	us, err := cl.ListUsers(c.Context)
	if err != nil {
		return fmt.Errorf("user list: %w", err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, us)
	}
	tb := newTable(c.App.Writer, "NAME", "GLOBAL ROLE", "CREATED")
	now := time.Now()
	for _, u := range us {
		tb.row(u.Name, u.Role, ago(now, u.CreatedAt))
	}
	return tb.flush()
}

func userCreate(c *cli.Context) error {
	args, err := posArgs(c, "NAME")
	if err != nil {
		return err
	}
	req := api.CreateUserRequest{Name: args[0], Role: api.RoleUser}
	if c.Bool("global-admin") {
		req.Role = api.RoleAdmin
	}
	cl, _, err := connect(c)
	if err != nil {
		return err
	}
	ut, err := cl.CreateUser(c.Context, req)
	if err != nil {
		return fmt.Errorf("user create %s: %w", args[0], err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, ut)
	}
	fmt.Fprintf(c.App.ErrWriter, "user %s created (global role %s); its token follows, shown this once: give it to them for gpud login --url %s --token TOKEN\n",
		ut.User.Name, ut.User.Role, cl.BaseURL())
	fmt.Fprintln(c.App.Writer, ut.Token)
	return nil
}

func userDelete(c *cli.Context) error {
	if c.NArg() == 0 {
		return usageError(errors.New("user delete: give at least one user name, like gpud user delete alice"))
	}
	cl, _, err := connect(c)
	if err != nil {
		return err
	}
	for _, name := range c.Args().Slice() {
		if err := cl.DeleteUser(c.Context, name); err != nil {
			return fmt.Errorf("user delete %s: %w", name, err)
		}
		fmt.Fprintf(c.App.Writer, "user %s deleted\n", name)
	}
	return nil
}

func userToken(c *cli.Context) error {
	if c.NArg() > 1 {
		return usageError(errors.New("user token: give at most one user name (none: yourself)"))
	}
	if _, err := posArgs(c, make([]string, c.NArg())...); err != nil {
		return err
	}
	cl, t, err := connect(c)
	if err != nil {
		return err
	}
	me, err := cl.WhoAmI(c.Context)
	if err != nil {
		return fmt.Errorf("user token: %w", err)
	}
	name := c.Args().First()
	if name == "" {
		name = me.Name
	}
	ut, err := cl.RotateToken(c.Context, name)
	if err != nil {
		return fmt.Errorf("user token %s: %w", name, err)
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, ut); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(c.App.Writer, ut.Token)
	}
	fmt.Fprintf(c.App.ErrWriter, "gpud: a new token for %s, shown this once; the old one stopped working now\n", name)
	if name == me.Name {
		// This very command ran with the old token: say where it came from.
		if os.Getenv(clientconf.EnvToken) != "" || t.Name == "" {
			fmt.Fprintln(c.App.ErrWriter, "gpud: GPUD_TOKEN holds the old token: set it to the new one")
		} else {
			fmt.Fprintf(c.App.ErrWriter, "gpud: entry %q of ~/.gpud/config.yml holds the old token: replace it with gpud login --url %s --token NEW --name %s\n", t.Name, t.URL, t.Name)
		}
	}
	return nil
}
