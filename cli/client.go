package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/clientconf"
)

// clientFlags are the flags of every command that talks to a server.
func clientFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "project", Aliases: []string{"p"}, Usage: "the project (default: $GPUD_PROJECT, the server entry's project, or main)"},
		&cli.StringFlag{Name: "server", Usage: "the server entry of ~/.gpud/config.yml to use (default: the current one; $GPUD_SERVER overrides the file)"},
	}, extra...)
}

// jsonFlag returns the --json flag of every command that prints a listing
// (a new one each time: urfave/cli records parse state in the flag value).
func jsonFlag() cli.Flag { return &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"} }

// resolveTarget reads the client config and picks the server and project.
func resolveTarget(c *cli.Context) (clientconf.Target, error) {
	home, err := clientconf.Home(os.Getenv)
	if err != nil {
		return clientconf.Target{}, err
	}
	file, _, err := clientconf.Load(clientconf.Path(home))
	if err != nil {
		return clientconf.Target{}, err
	}
	return clientconf.Resolve(os.Getenv, file, c.String("server"), c.String("project"))
}

// errNoServer explains what to do when a command needs a server and none is
// configured (only gpud run has an embedded default).
var errNoServer = errors.New("no server is configured — start one with gpud serve and run " +
	"gpud login --url URL --token TOKEN, or set GPUD_SERVER and GPUD_TOKEN")

// connect returns a client of the configured server for commands that have
// no embedded default.
func connect(c *cli.Context) (*api.Client, clientconf.Target, error) {
	t, err := resolveTarget(c)
	if err != nil {
		return nil, t, err
	}
	if t.Embedded {
		return nil, t, errNoServer
	}
	cl, err := api.NewClient(t.URL, t.Token, nil)
	return cl, t, err
}

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

// printJSON writes v as indented JSON with a trailing newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("print JSON: %w", err)
	}
	return nil
}

// table writes aligned columns; rows are tab-separated, Flush prints them.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return fmt.Errorf("print table: %w", err)
	}
	return nil
}

// ago formats how long ago ts was, "-" for the zero time.
func ago(now, ts time.Time) string {
	if ts.IsZero() {
		return "-"
	}
	d := now.Sub(ts)
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// orDash returns s, or "-" when s is empty, so table cells never vanish.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// stdinIsTerminal reports whether questions can be asked on stdin.
func stdinIsTerminal() bool {
	return isatty.IsTerminal(os.Stdin.Fd()) || isatty.IsCygwinTerminal(os.Stdin.Fd())
}

// stderrIsTerminal reports whether a live status line can be redrawn.
func stderrIsTerminal() bool { return isatty.IsTerminal(os.Stderr.Fd()) }

// humanSize formats a byte count for tables: "512MB", "23.5GB", "1.2TB";
// Size.String keeps every digit, which suits configurations, not columns.
func humanSize(s api.Size) string {
	switch {
	case s == 0:
		return "0"
	case s < api.GB:
		return fmt.Sprintf("%.4gMB", float64(s)/float64(api.MB))
	case s < api.TB:
		return fmt.Sprintf("%.4gGB", float64(s)/float64(api.GB))
	}
	return fmt.Sprintf("%.4gTB", float64(s)/float64(api.TB))
}
