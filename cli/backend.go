package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// backendCommand manages a project's backends: the engines and clouds
// (Kubernetes, external plugins) that run work beyond the project's own
// hosts (docs/backends.md).
func backendCommand() *cli.Command {
	return &cli.Command{
		Name:  "backend",
		Usage: "add, list and delete the project's backends (Kubernetes, external plugins)",
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "check a backend's configuration through its plugin and store it (project admins)",
				ArgsUsage: "FILE (YAML: type, name and the type's fields, like an entry of the server configuration's backends; - reads stdin)",
				Flags:     clientFlags(&cli.StringFlag{Name: "name", Usage: "the backend's name (default: the file's name, else its type)"}, jsonFlag()),
				Action:    backendAdd,
			},
			{
				Name:   "list",
				Usage:  "list the project's backends: type, plugin, protocol, state (never their credentials)",
				Flags:  clientFlags(jsonFlag()),
				Action: backendList,
			},
			{
				Name:      "delete",
				Usage:     "stop a backend's plugin and delete its configuration (project admins)",
				ArgsUsage: "NAME",
				Flags:     clientFlags(),
				Action:    backendDelete,
			},
		},
	}
}

// readBackendFile reads a backend entry and splits it into the request.
func readBackendFile(path string, stdin io.Reader) (api.AddBackendRequest, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return api.AddBackendRequest{}, err
	}
	var fields map[string]any
	if err := api.DecodeYAML(path, data, &fields); err != nil {
		return api.AddBackendRequest{}, err
	}
	var req api.AddBackendRequest
	req.Type, _ = fields["type"].(string)
	req.Name, _ = fields["name"].(string)
	if req.Type == "" {
		return req, fmt.Errorf("%s: type: required (kubernetes, slurm, or an external plugin's type)", path)
	}
	delete(fields, "type")
	delete(fields, "name")
	if fields == nil {
		fields = map[string]any{}
	}
	req.Config, err = json.Marshal(fields)
	return req, err
}

func backendAdd(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(errors.New("backend add takes one FILE"))
	}
	req, err := readBackendFile(c.Args().First(), os.Stdin)
	if err != nil {
		return usageError(err)
	}
	if n := c.String("name"); n != "" {
		req.Name = n
	}
	cl, t, err := connect(c)
	if err != nil {
		return err
	}
	b, err := cl.AddBackend(c.Context, t.Project, req)
	if err != nil {
		return fmt.Errorf("backend add: %w", err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, b)
	}
	fmt.Fprintf(c.App.Writer, "backend %s (%s, %s) checked and stored: %s\n", b.Name, b.Type, pluginKind(b), b.State)
	return nil
}

func pluginKind(b api.Backend) string {
	if b.External {
		return "external " + b.Plugin
	}
	return orDash(b.Plugin)
}

func backendList(c *cli.Context) error {
	cl, t, err := connect(c)
	if err != nil {
		return err
	}
	bs, err := cl.ListBackends(c.Context, t.Project)
	if err != nil {
		return fmt.Errorf("backend list: %w", err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, bs)
	}
	if len(bs) == 0 {
		fmt.Fprintln(c.App.Writer, "no backends (gpud backend add FILE; docs/backends.md)")
		return nil
	}
	tb := newTable(c.App.Writer, "NAME", "TYPE", "PLUGIN", "PROTOCOL", "VERSION", "STATE", "RESTARTS", "GANGS", "SOURCE")
	for _, b := range bs {
		state := b.State
		if b.LastError != "" {
			state += " (" + b.LastError + ")"
		}
		proto := "-"
		if b.Protocol != 0 {
			proto = strconv.Itoa(b.Protocol)
		}
		tb.row(b.Name, b.Type, pluginKind(b), proto, orDash(b.PluginVersion), state, strconv.Itoa(b.Restarts), strconv.Itoa(b.Gangs), b.Source)
	}
	return tb.flush()
}

func backendDelete(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError(errors.New("backend delete takes one NAME"))
	}
	cl, t, err := connect(c)
	if err != nil {
		return err
	}
	if err := cl.DeleteBackend(c.Context, t.Project, c.Args().First()); err != nil {
		return fmt.Errorf("backend delete: %w", err)
	}
	fmt.Fprintf(c.App.Writer, "backend %s deleted\n", c.Args().First())
	return nil
}
