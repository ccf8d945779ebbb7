package cli

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/plugins/aws"
	"gpud.dev/gpud/plugins/kubernetes"
	"gpud.dev/gpud/plugins/slurm"
)

// builtinBackends are the backend types compiled into gpud; the server
// runs each as a `gpud plugin serve TYPE` subprocess, so a crash or a
// heavy SDK stays out of the server (DESIGN.md §8).
func builtinBackends() plugins.Builtins {
	return plugins.Builtins{
		"aws": func(raw json.RawMessage, log zerolog.Logger) (plugins.Backend, error) {
			var cfg aws.Config
			if err := strictJSON(raw, &cfg); err != nil {
				return nil, fmt.Errorf("aws backend: %w", err)
			}
			return aws.New(cfg, log)
		},
		"kubernetes": func(raw json.RawMessage, _ zerolog.Logger) (plugins.Backend, error) {
			var cfg kubernetes.Config
			if err := strictJSON(raw, &cfg); err != nil {
				return nil, fmt.Errorf("kubernetes backend: %w", err)
			}
			return kubernetes.New(cfg)
		},
		"slurm": func(raw json.RawMessage, log zerolog.Logger) (plugins.Backend, error) {
			var cfg slurm.Config
			if err := strictJSON(raw, &cfg); err != nil {
				return nil, fmt.Errorf("slurm backend: %w", err)
			}
			return slurm.New(cfg, log)
		},
	}
}

// strictJSON decodes raw into v, refusing fields v does not have (by
// name), so a misspelt backend field fails at `gpud backend add`.
func strictJSON(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// pluginCommand is the hidden `gpud plugin serve NAME`: the server starts
// it to run a built-in backend as its own subprocess. The backend's
// configuration arrives over the plugin's connection, never in argv or
// the environment.
func pluginCommand() *cli.Command {
	return &cli.Command{
		Name:   "plugin",
		Hidden: true,
		Usage:  "serve a built-in backend over go-plugin (started by gpud serve)",
		Subcommands: []*cli.Command{{
			Name:      "serve",
			Usage:     "serve the built-in backend NAME",
			ArgsUsage: "NAME",
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usageError(fmt.Errorf("plugin serve takes one backend type: %v", builtinBackends().Names()))
				}
				return builtinBackends().Serve(c.Args().First())
			},
		}},
	}
}
