package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/store"
)

// adminCommand groups the offline maintenance of a server's state file.
// Each subcommand opens the state file itself, so the server must be
// stopped (the open fails within a second, saying so, if it runs).
func adminCommand() *cli.Command {
	dataDir := &cli.StringFlag{Name: "data-dir", Usage: "the server's state directory (default ~/.gpud/server)", EnvVars: []string{"GPUD_DATA_DIR"}}
	return &cli.Command{
		Name:  "admin",
		Usage: "maintain the server's state file: backup, restore, check, rotate-key (server stopped)",
		Subcommands: []*cli.Command{
			{
				Name:      "backup",
				Usage:     "write a consistent snapshot of the state file to FILE (values stay encrypted: keep the key file too)",
				ArgsUsage: "FILE",
				Flags:     []cli.Flag{dataDir},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usageError(errors.New("admin backup: give the backup file"))
					}
					return withAdminStore(c, func(s *store.Store) error {
						n, err := s.BackupFile(c.Context, c.Args().First())
						if err != nil {
							return err
						}
						fmt.Fprintf(c.App.Writer, "backup: %d bytes written to %s\n", n, c.Args().First())
						return nil
					})
				},
			},
			{
				Name:      "restore",
				Usage:     "replace the state file with backup FILE (the old file is kept as state.db.before-restore)",
				ArgsUsage: "FILE",
				Flags:     []cli.Flag{dataDir},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usageError(errors.New("admin restore: give the backup file"))
					}
					dir, err := adminDataDir(c)
					if err != nil {
						return err
					}
					if err := store.Restore(c.Args().First(), filepath.Join(dir, "state.db")); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "restored %s from %s\n", filepath.Join(dir, "state.db"), c.Args().First())
					return nil
				},
			},
			{
				Name:  "check",
				Usage: "verify the state file: records decode, indexes match records, references resolve",
				Flags: []cli.Flag{dataDir},
				Action: func(c *cli.Context) error {
					return withAdminStore(c, func(s *store.Store) error {
						probs, err := s.Check(c.Context)
						if err != nil {
							return err
						}
						for _, p := range probs {
							fmt.Fprintln(c.App.Writer, p)
						}
						if len(probs) > 0 {
							return invalidInputf("check: %d problems", len(probs))
						}
						fmt.Fprintln(c.App.Writer, "check: ok")
						return nil
					})
				},
			},
			{
				Name:  "rotate-key",
				Usage: "add a new encryption key, make it primary and re-encrypt every secret with it (old keys still decrypt)",
				Flags: []cli.Flag{dataDir},
				Action: func(c *cli.Context) error {
					return withAdminStore(c, func(s *store.Store) error {
						if s.Keyring() == nil {
							return errors.New("rotate-key: the store is in plaintext mode")
						}
						old := s.Keyring().Primary()
						if err := s.Keyring().Rotate(); err != nil {
							return fmt.Errorf("rotate-key: %w", err)
						}
						n, err := s.Reencrypt(c.Context)
						if err != nil {
							return fmt.Errorf("rotate-key: %w", err)
						}
						fmt.Fprintf(c.App.Writer, "rotate-key: primary key %s -> %s, %d values re-encrypted\n", old, s.Keyring().Primary(), n)
						return nil
					})
				},
			},
		},
	}
}

func adminDataDir(c *cli.Context) (string, error) {
	if d := c.String("data-dir"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("admin: no --data-dir and no home directory: %w", err)
	}
	return filepath.Join(home, ".gpud", "server"), nil
}

// openAdminStore opens the state file the way the server does; the key
// comes from the key file beside it or from $GPUD_STATE_KEY.
func openAdminStore(c *cli.Context) (*store.Store, error) {
	dir, err := adminDataDir(c)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "state.db")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	return store.Open(path, store.Options{KeyEnv: os.Getenv("GPUD_STATE_KEY")})
}

// withAdminStore opens the state file with openAdminStore, runs fn on it
// and closes it, whatever fn returns.
func withAdminStore(c *cli.Context, fn func(*store.Store) error) error {
	s, err := openAdminStore(c)
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(s)
}
