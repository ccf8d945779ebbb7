package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/clientconf"
)

// loginCommand records a server and its token in ~/.gpud/config.yml.
func loginCommand() *cli.Command {
	return &cli.Command{
		Name:  "login",
		Usage: "check a server URL and token and save them in ~/.gpud/config.yml as the current server",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "url", Usage: "the server, like http://127.0.0.1:3000"},
			&cli.StringFlag{Name: "token", Usage: "your API token (gpud serve prints the admin token once)", EnvVars: []string{clientconf.EnvToken}},
			&cli.StringFlag{Name: "name", Value: "default", Usage: "the name of this server entry"},
			&cli.StringFlag{Name: "project", Usage: "the default project for this server (default: main)"},
		},
		Action: func(c *cli.Context) error {
			if err := requireFlags(c, "url", "token"); err != nil {
				return err
			}
			if c.NArg() > 0 {
				return usageError(errors.New("login: takes no arguments, only --url and --token"))
			}
			entry := clientconf.Server{URL: c.String("url"), Token: c.String("token"), Project: c.String("project")}
			if err := clientconf.CheckURL(entry.URL); err != nil {
				return usageError(err)
			}
			cl, err := api.NewClient(entry.URL, entry.Token, nil)
			if err != nil {
				return usageError(err)
			}
			user, err := cl.WhoAmI(c.Context)
			if err != nil {
				return fmt.Errorf("login to %s: %w", entry.URL, err)
			}
			home, err := clientconf.Home(os.Getenv)
			if err != nil {
				return err
			}
			path := clientconf.Path(home)
			file, _, err := clientconf.Load(path)
			if err != nil {
				return err
			}
			if err := file.Login(c.String("name"), entry); err != nil {
				return usageError(err)
			}
			if err := file.Save(path); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "logged in to %s as %s (%s); saved as %q in %s\n", entry.URL, user.Name, user.Role, c.String("name"), path)
			return nil
		},
	}
}
