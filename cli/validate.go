package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// validateCommand checks configuration files and prints them normalized.
func validateCommand() *cli.Command {
	return &cli.Command{
		Name:      "validate",
		Usage:     "check configurations and print each normalized, with defaults filled in",
		ArgsUsage: "FILE... (- reads standard input)",
		Description: "Reads dstack-style configurations (task, service, dev-environment, fleet, volume,\n" +
			"gateway) and gpud queues. Every error is printed with file:line:col, the source line and\n" +
			"a fix. Exit code 1 when any file is invalid, 2 for a wrong command line.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the normalized spec as JSON (valid input for gpud itself)"},
			&cli.StringFlag{Name: "profile", Usage: "merge the named profile of .gpud/profiles.yml or .dstack/profiles.yml into runs (default: the profile marked default: true)"},
		},
		Action: func(c *cli.Context) error {
			return runValidate(c.Args().Slice(), c.Bool("json"), c.String("profile"), c.App.Reader, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// runValidate validates each file; it returns a usage error for a wrong
// command line and an exit-1 error when any file is invalid, after printing
// every error of every file.
func runValidate(files []string, asJSON bool, profileName string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(files) == 0 {
		return usageError(errors.New("validate: give at least one configuration file, like gpud validate task.yml"))
	}
	profile, err := selectProfile(profileName)
	if err != nil {
		var el api.ErrorList
		if errors.As(err, &el) {
			fmt.Fprintln(stderr, el.Error())
			return invalidInput(errors.New("gpud validate: the profiles file is invalid"))
		}
		return usageError(err)
	}
	invalid := 0
	for _, path := range files {
		cfg, err := parseArg(path, stdin, profile)
		if err != nil {
			invalid++
			fmt.Fprintln(stderr, err.Error())
			continue
		}
		if err := printConfig(stdout, path, cfg, asJSON); err != nil {
			return fmt.Errorf("validate: print %s: %w", path, err)
		}
	}
	if invalid > 0 {
		return invalidInputf("gpud validate: %d of %d files are invalid", invalid, len(files))
	}
	return nil
}

// parseArg parses the file at path, or standard input for "-".
func parseArg(path string, stdin io.Reader, profile *api.Profile) (*api.Config, error) {
	if path != "-" {
		return api.ParseFile(path, api.WithProfile(profile))
	}
	data, err := io.ReadAll(io.LimitReader(stdin, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("read standard input: %w", err)
	}
	return api.Parse("<stdin>", data, api.WithProfile(profile))
}

// printConfig writes the normalized spec: JSON, or a header line and the
// same spec as YAML for people.
func printConfig(w io.Writer, path string, cfg *api.Config, asJSON bool) error {
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if asJSON {
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	y, err := yaml.JSONToYAML(b)
	if err != nil {
		return fmt.Errorf("format as YAML: %w", err)
	}
	header := fmt.Sprintf("# %s: valid %s", path, cfg.Kind)
	if name := cfg.Name(); name != "" {
		header += fmt.Sprintf(" %q", name)
	}
	_, err = fmt.Fprintf(w, "%s\n%s\n", header, strings.TrimRight(string(y), "\n"))
	return err
}
