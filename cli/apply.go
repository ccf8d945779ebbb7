package cli

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/upload"
)

// applyCommand creates or updates any configuration on the server.
func applyCommand() *cli.Command {
	return &cli.Command{
		Name:      "apply",
		Usage:     "create or update configurations: fleets, queues, volumes, gateways, and runs (submitted like gpud run -d)",
		ArgsUsage: "FILE...",
		Description: "Each file is validated locally first (errors with file:line:col, exit 1), then sent.\n" +
			"Runs are submitted without following them; an active run of the same name is\n" +
			"replaced only with --force.",
		Flags: clientFlags(
			&cli.BoolFlag{Name: "force", Usage: "replace active runs of the same name"},
			jsonFlag(),
		),
		Action: runApply,
	}
}

func runApply(c *cli.Context) error {
	if c.NArg() == 0 {
		return usageError(errors.New("apply: give at least one configuration file, like gpud apply fleet.yml"))
	}
	type parsed struct {
		path   string
		cfg    *api.Config
		source []byte
	}
	var files []parsed
	invalid := 0
	for _, path := range c.Args().Slice() {
		source, err := os.ReadFile(path)
		if err != nil {
			return invalidInputf("gpud apply: %w", err)
		}
		cfg, err := api.Parse(path, source)
		if err != nil {
			invalid++
			printParseError(c, err)
			continue
		}
		files = append(files, parsed{path, cfg, source})
	}
	if invalid > 0 {
		return invalidInputf("gpud apply: %d of %d files are invalid; nothing was applied", invalid, c.NArg())
	}
	cl, t, err := connect(c)
	if err != nil {
		return err
	}
	var results []any
	for _, f := range files {
		req := api.ApplyRequest{ConfigurationYAML: string(f.source), Filename: filepath.Base(f.path)}
		var (
			res  any
			line string
		)
		switch f.cfg.Kind {
		case api.KindTask, api.KindService, api.KindDevEnvironment:
			sum, err := upload.Send(c.Context, cl, t.Project, f.cfg.Run(), filepath.Dir(f.path), 0, c.App.ErrWriter)
			if err != nil {
				return invalidInputf("gpud apply %s: %w", f.path, err)
			}
			run, err := cl.ApplyRun(c.Context, t.Project, api.ApplyRunRequest{ApplyRequest: req, Env: api.ClientEnv(f.cfg, f.source, os.LookupEnv), Force: c.Bool("force"), Upload: sum})
			if err != nil {
				return serverError("apply "+f.path, err, c.App.ErrWriter)
			}
			res, line = run, fmt.Sprintf("run %s: %s", run.Name, run.Status)
			if strings.HasPrefix(run.Reason, "rolling update") {
				line += " — " + run.Reason // a running service updated in place
			}
		case api.KindFleet:
			fl, err := cl.ApplyFleet(c.Context, t.Project, req)
			if err != nil {
				return serverError("apply "+f.path, err, c.App.ErrWriter)
			}
			res, line = fl, fmt.Sprintf("fleet %s: %s, %d instances", fl.Name, fl.Status, len(fl.Instances))
		case api.KindQueue:
			q, err := cl.ApplyQueue(c.Context, t.Project, req)
			if err != nil {
				return serverError("apply "+f.path, err, c.App.ErrWriter)
			}
			res, line = q, fmt.Sprintf("queue %s: applied (quota gpu/cpu/memory %s)", q.Name, amounts(q.Quota))
		case api.KindVolume:
			v, err := cl.ApplyVolume(c.Context, t.Project, req)
			if err != nil {
				return serverError("apply "+f.path, err, c.App.ErrWriter)
			}
			res, line = v, fmt.Sprintf("volume %s: %s (backend %s)", v.Name, v.Status, v.Backend)
			if v.Claim != "" {
				line = fmt.Sprintf("volume %s: %s (backend %s, claim %s, %s)", v.Name, v.Status, v.Backend, v.Claim, v.State)
			}
		default:
			raw, err := cl.ApplyConfig(c.Context, t.Project, f.cfg.Kind, req)
			if api.IsStatus(err, http.StatusNotFound) || api.IsStatus(err, http.StatusMethodNotAllowed) {
				return invalidInputf("gpud apply %s: this server does not manage %ss yet", f.path, f.cfg.Kind)
			}
			if err != nil {
				return serverError("apply "+f.path, err, c.App.ErrWriter)
			}
			res, line = raw, fmt.Sprintf("%s %s: applied", f.cfg.Kind, f.cfg.Name())
		}
		results = append(results, res)
		if !c.Bool("json") {
			fmt.Fprintln(c.App.Writer, line)
		}
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, results)
	}
	return nil
}

// printParseError prints every configuration error with its source line.
func printParseError(c *cli.Context, err error) {
	var el api.ErrorList
	if errors.As(err, &el) {
		for _, e := range el {
			fmt.Fprintln(c.App.ErrWriter, e.Detail())
		}
		return
	}
	fmt.Fprintln(c.App.ErrWriter, err)
}
