package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// volumeCommand lists and deletes gpud-managed volumes (`type: volume`
// with backend local, ssh or registered) and the volumes of a project's
// Kubernetes backend (claims).
func volumeCommand() *cli.Command {
	return &cli.Command{
		Name:  "volume",
		Usage: "list the project's volumes; apply or delete them",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list volumes: backend, host or claim, status, size used, the active runs that use them, last use",
				Flags: clientFlags(jsonFlag()),
				Action: func(c *cli.Context) error {
					cl, t, err := connect(c)
					if err != nil {
						return err
					}
					vs, err := cl.ListVolumes(c.Context, t.Project)
					if err != nil {
						return serverError("volume list", err, c.App.ErrWriter)
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, vs)
					}
					return printVolumes(c.App.Writer, vs, time.Now())
				},
			},
			{
				Name:      "apply",
				Usage:     "create or update volumes from type: volume files (same as gpud apply)",
				ArgsUsage: "FILE...",
				Flags:     clientFlags(jsonFlag()),
				Action:    runApply,
			},
			{
				Name:      "delete",
				Usage:     "delete volumes and their data (a backend's claim too, unless it was registered with claim_name); refused while an active run uses one",
				ArgsUsage: "VOLUME...",
				Flags: clientFlags(
					&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "delete without asking"},
				),
				Action: runVolumeDelete,
			},
		},
	}
}

func runVolumeDelete(c *cli.Context) error {
	if c.NArg() == 0 {
		return usageError(errors.New("volume delete: give at least one volume name"))
	}
	names := c.Args().Slice()
	if !c.Bool("yes") {
		if !stdinIsTerminal() {
			return usageError(errors.New("volume delete: this deletes the volumes' data; pass -y to confirm without a terminal"))
		}
		if !ask(c.App.ErrWriter, "Delete volume "+strings.Join(names, ", ")+" and all its data?") {
			return errors.New("volume delete: not confirmed; nothing was deleted")
		}
	}
	cl, t, err := connect(c)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := cl.DeleteVolume(c.Context, t.Project, name); err != nil {
			return serverError("volume delete "+name, err, c.App.ErrWriter)
		}
		fmt.Fprintf(c.App.Writer, "volume %s deleted\n", name)
	}
	return nil
}

// printVolumes writes one row per volume.
func printVolumes(w io.Writer, vs []api.Volume, now time.Time) error {
	if len(vs) == 0 {
		fmt.Fprintln(w, "no volumes")
		return nil
	}
	t := newTable(w, "NAME", "BACKEND", "HOST/CLAIM", "STATUS", "USED", "SIZE", "RUNS", "LAST USED", "AUTO CLEANUP", "CREATED")
	for _, v := range vs {
		used := "-"
		if v.Used >= 0 {
			used = humanSize(v.Used)
		}
		size := "-"
		if v.Size > 0 {
			size = humanSize(v.Size)
		}
		host := orDash(v.Hostname)
		if v.Instance != "" && v.Hostname == "" {
			host = v.Instance
		}
		backend, status := v.Backend, v.Status
		if v.Claim != "" {
			host = "claim " + v.Claim
			if v.Registered {
				host += " (registered)"
			}
			if v.BackendType != "" && v.BackendType != v.Backend {
				backend += " (" + v.BackendType + ")"
			}
		}
		if v.State != "" {
			status += " (" + v.State + ")"
		}
		last := "-"
		if !v.LastUsed.IsZero() {
			last = ago(now, v.LastUsed)
		}
		t.row(v.Name, backend, host, status, used, size, orDash(strings.Join(v.Runs, ",")), last, orDash(v.AutoCleanupDuration), ago(now, v.CreatedAt))
	}
	return t.flush()
}
