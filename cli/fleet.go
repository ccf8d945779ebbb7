package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// fleetCommand is `gpud fleet`: list fleets with their hosts, delete a
// fleet (its SSH hosts' agents are stopped and removed), and issue or
// revoke registration tokens for `gpud agent --server`.
func fleetCommand() *cli.Command {
	return &cli.Command{
		Name:  "fleet",
		Usage: "list fleets and their hosts, delete fleets, issue and revoke registration tokens",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list fleets with each host's backend, status, accelerators, free capacity and health",
				Flags: clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					fs, err := cl.ListFleets(c.Context, t.Project)
					if err != nil {
						return fmt.Errorf("fleet list: %w", err)
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, fs)
					}
					return printFleets(c.App.Writer, fs, time.Now())
				},
			},
			{
				Name:      "get",
				Usage:     "show one fleet: its hosts, or a backend fleet's backends and the nodes its runs hold",
				ArgsUsage: "FLEET",
				Flags:     clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					name, err := oneArg(c, "fleet")
					if err != nil {
						return err
					}
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					f, err := cl.GetFleet(c.Context, t.Project, name)
					if err != nil {
						return fmt.Errorf("fleet get: %w", err)
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, f)
					}
					return printFleets(c.App.Writer, []api.Fleet{f}, time.Now())
				},
			},
			{
				Name:      "delete",
				Usage:     "delete a fleet with no jobs (a backend fleet: no active runs); the agents its SSH hosts run are stopped and removed",
				ArgsUsage: "FLEET",
				Flags:     clientFlags(),
				Action: func(c *cli.Context) error {
					name, err := oneArg(c, "fleet")
					if err != nil {
						return err
					}
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					if err := cl.DeleteFleet(c.Context, t.Project, name); err != nil {
						return fmt.Errorf("fleet delete: %w", err)
					}
					fmt.Fprintf(c.App.Writer, "fleet %s deleted\n", name)
					return nil
				},
			},
			{
				Name:      "token",
				Usage:     "issue a registration token: hosts that run gpud agent --server URL with the token in GPUD_AGENT_TOKEN or --token-file join FLEET (shared fleets: global admins only)",
				ArgsUsage: "FLEET",
				Flags:     clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					name, err := oneArg(c, "fleet")
					if err != nil {
						return err
					}
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					tok, err := cl.IssueRegistrationToken(c.Context, t.Project, name)
					if err != nil {
						return fmt.Errorf("fleet token: %w", err)
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, tok)
					}
					fmt.Fprintf(c.App.Writer, "Registration token %s for fleet %s (shown once; only its hash is stored):\n  %s\n"+
						"On each host, put it in a file only root reads (umask 077; cat > /etc/gpud/registration-token) and run:\n"+
						"  gpud agent --server https://SERVER:PORT --token-file /etc/gpud/registration-token [--server-ca registration-ca.pem]\n"+
						"(or export GPUD_AGENT_TOKEN; never pass --token: a flag shows in ps)\n"+
						"Revoke with: gpud fleet revoke %s %s\n", tok.ID, name, tok.Token, name, tok.ID)
					return nil
				},
			},
			{
				Name:      "revoke",
				Usage:     "revoke a registration token; hosts registered with it are disconnected, their keys forgotten, and they cannot come back with it",
				ArgsUsage: "FLEET TOKEN_ID",
				Flags:     clientFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() != 2 {
						return usageError(fmt.Errorf("fleet revoke: give the fleet and the token id, like gpud fleet revoke FLEET ID"))
					}
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					if err := cl.RevokeRegistrationToken(c.Context, t.Project, c.Args().Get(0), c.Args().Get(1)); err != nil {
						return fmt.Errorf("fleet revoke: %w", err)
					}
					fmt.Fprintf(c.App.Writer, "token %s revoked\n", c.Args().Get(1))
					return nil
				},
			},
		},
	}
}

// printFleets prints one row per host (a fleet without hosts gets one
// row of its own), so hosts, their accelerators, what is free on them and
// their health read at a glance.
func printFleets(w io.Writer, fs []api.Fleet, now time.Time) error {
	tb := newTable(w, "FLEET", "HOST", "BACKEND", "STATUS", "GPUS", "FREE GPUS", "CPUS", "MEMORY", "PRICE", "HEALTH")
	var backendFleets []api.Fleet
	for _, f := range fs {
		if f.Nodes != nil && len(f.Instances) == 0 {
			backendFleets = append(backendFleets, f) // below, in a table of their own
			continue
		}
		if len(f.Instances) == 0 {
			tb.row(f.Name, "-", "-", f.Status, "-", "-", "-", "-", "-", "-")
			continue
		}
		for _, in := range f.Instances {
			gpus := "-"
			if in.Resources.GPUs > 0 {
				gpus = fmt.Sprintf("%g×%s", in.Resources.GPUs, orDash(in.Resources.GPUName))
				if in.Resources.GPUMemory > 0 {
					gpus += ":" + humanSize(in.Resources.GPUMemory)
				}
			}
			price := "-" // a host gpud did not make costs what its owner pays
			if in.Price > 0 {
				price = fmt.Sprintf("$%g/h", in.Price)
				if in.InstanceType != "" {
					price += " " + in.InstanceType
				}
			}
			tb.row(f.Name, orDash(in.Hostname), orDash(in.Backend), in.Status, gpus, fmt.Sprintf("%g", in.Free.GPUs),
				fmt.Sprintf("%g", in.Resources.CPUs), humanSize(in.Resources.Memory), price, instanceHealth(in, now))
		}
	}
	if len(backendFleets) == 0 || len(backendFleets) < len(fs) {
		if err := tb.flush(); err != nil {
			return err
		}
	}
	if len(backendFleets) == 0 {
		return nil
	}
	if len(backendFleets) < len(fs) {
		fmt.Fprintln(w)
	}
	return printBackendFleets(w, backendFleets)
}

// printBackendFleets prints one row per backend fleet: the backends its
// capacity comes from (each entry as written, and the backends it
// selects) and the nodes its runs hold against its maximum.
func printBackendFleets(w io.Writer, fs []api.Fleet) error {
	tb := newTable(w, "FLEET", "BACKENDS", "NODES IN USE", "STATUS", "NOTE")
	for _, f := range fs {
		var backends, notes []string
		for _, b := range f.Backends {
			switch {
			case len(b.Selects) == 0:
				backends = append(backends, b.Name+" (none)")
				notes = append(notes, b.Reason)
			case len(b.Selects) == 1 && b.Selects[0] == b.Name:
				backends = append(backends, b.Name)
			default:
				backends = append(backends, b.Name+" ("+strings.Join(b.Selects, ", ")+")")
			}
		}
		nodes := fmt.Sprintf("%d", f.Nodes.InUse)
		if f.Nodes.Max != nil {
			nodes += fmt.Sprintf("/%d", *f.Nodes.Max)
		}
		tb.row(f.Name, strings.Join(backends, ", "), nodes, f.Status, orDash(strings.Join(notes, "; ")))
	}
	return tb.flush()
}

// instanceHealth is the host's reason when it has one (unreachable, ...),
// else when the server last heard from it.
func instanceHealth(in api.Instance, now time.Time) string {
	if in.Reason != "" {
		return strings.SplitN(in.Reason, "\n", 2)[0]
	}
	if in.LastHeartbeat.IsZero() {
		return "ok"
	}
	return "ok, seen " + ago(now, in.LastHeartbeat)
}
