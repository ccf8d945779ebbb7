package cli

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/crypto/ssh"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/atomicfile"
	"gpud.dev/gpud/internal/clientconf"
)

// sshConfigCommand writes the ~/.ssh/config entry that makes `ssh RUN`
// reach the run's job through the server.
func sshConfigCommand() *cli.Command {
	return &cli.Command{
		Name:      "ssh-config",
		Usage:     "set up `ssh RUN`: make your SSH key, register it with the server, write RUN's Host entry",
		ArgsUsage: "RUN",
		Description: "Makes ~/.gpud/ssh/id_ed25519 if missing and registers its public key as yours on the\n" +
			"server (the agent accepts only that key, and only for runs of your projects), writes\n" +
			"a Host RUN entry to ~/.gpud/ssh/config and includes that file from ~/.ssh/config.\n" +
			"`ssh RUN` then opens a shell in the run's first running job, through the server\n" +
			"(ProxyCommand gpud ssh-proxy RUN): no port is opened on the host. scp and sftp work\n" +
			"when the job's image has an sftp-server (else scp -O, with scp in the image).",
		Flags: clientFlags(
			&cli.BoolFlag{Name: "no-include", Usage: "do not add the Include line to ~/.ssh/config (use ssh -F ~/.gpud/ssh/config)"},
		),
		Action: runSSHConfig,
	}
}

// sshProxyCommand is the ProxyCommand of the entries ssh-config writes.
func sshProxyCommand() *cli.Command {
	return &cli.Command{
		Name:      "ssh-proxy",
		Hidden:    true,
		Usage:     "carry SSH to a run's job over standard input and output (ProxyCommand)",
		ArgsUsage: "RUN",
		Flags:     clientFlags(&cli.StringFlag{Name: "job", Usage: "the job's id or name (default: the run's first running job)"}),
		Action:    runSSHProxy,
	}
}

func runSSHProxy(c *cli.Context) error {
	name, cl, t, err := connectRun(c)
	if err != nil {
		return err
	}
	conn, err := cl.DialRunSSH(c.Context, t.Project, name, c.String("job"))
	if err != nil {
		return fmt.Errorf("ssh %s: %w", name, err)
	}
	defer conn.Close()
	go func() {
		_, _ = io.Copy(conn, os.Stdin) // ends when ssh closes our stdin or the stream ends
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite() // the SSH client finished; the server sees EOF
		}
	}()
	// The session ends when the server closes the stream.
	_, err = io.Copy(os.Stdout, conn)
	return err
}

func runSSHConfig(c *cli.Context) error {
	name, cl, t, err := connectRun(c)
	if err != nil {
		return err
	}
	entry, err := writeSSHConfig(c.Context, cl, t, name, !c.Bool("no-include"))
	if err != nil {
		return fmt.Errorf("ssh-config %s: %w", name, err)
	}
	fmt.Fprintf(c.App.Writer, "ssh %s  (Host entry in %s)\n", name, entry)
	return nil
}

// writeSSHConfig makes and registers the user's key and writes run's Host
// entry; it returns the path of the file that holds the entry.
func writeSSHConfig(ctx context.Context, cl *api.Client, t clientconf.Target, run string, include bool) (string, error) {
	home, err := clientconf.Home(os.Getenv)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(home, "ssh")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	keyPath := filepath.Join(dir, "id_ed25519")
	pub, err := loadOrMakeKey(keyPath)
	if err != nil {
		return "", err
	}
	me, err := cl.WhoAmI(ctx)
	if err != nil {
		return "", err
	}
	if _, err := cl.SetSSHKey(ctx, me.Name, pub); err != nil {
		return "", fmt.Errorf("register the SSH key: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	proxy := []string{quoteSSH(exe), "ssh-proxy", "--project", quoteSSH(t.Project)}
	if t.Name != "" {
		proxy = append(proxy, "--server", quoteSSH(t.Name))
	}
	proxy = append(proxy, quoteSSH(run))
	block := strings.Join([]string{
		"Host " + run,
		"    HostName " + run + ".gpud",
		"    User " + me.Name,
		"    IdentityFile " + quoteSSH(keyPath),
		"    IdentitiesOnly yes",
		"    ProxyCommand " + strings.Join(proxy, " "),
		// The agent's host key is made per agent process and reached only
		// through the authenticated server; there is nothing to pin.
		"    StrictHostKeyChecking no",
		"    UserKnownHostsFile /dev/null",
		"    LogLevel ERROR",
		"    ServerAliveInterval 30",
	}, "\n") + "\n"
	cfgPath := filepath.Join(dir, "config")
	old, err := os.ReadFile(cfgPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := atomicfile.WriteFile(cfgPath, []byte(replaceHost(string(old), run, block)), 0o600); err != nil {
		return "", err
	}
	if include {
		if err := includeFrom(cfgPath); err != nil {
			return "", err
		}
	}
	return cfgPath, nil
}

// loadOrMakeKey returns the public key of the key pair at path (an
// OpenSSH private key, path.pub the public one), making it if missing.
func loadOrMakeKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		signer, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	pubKey, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, "gpud")
	if err != nil {
		return "", err
	}
	sp, err := ssh.NewPublicKey(pubKey)
	if err != nil {
		return "", err
	}
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " gpud"
	if err := atomicfile.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return "", err
	}
	if err := atomicfile.WriteFile(path+".pub", []byte(pub+"\n"), 0o644); err != nil {
		return "", err
	}
	return pub, nil
}

// replaceHost puts block in place of config's "Host run" entry, or at its
// end.
func replaceHost(config, run, block string) string {
	var out []string
	skip, replaced := false, false
	for _, line := range strings.SplitAfter(config, "\n") {
		if line == "" {
			continue
		}
		if f := strings.Fields(line); len(f) > 0 && strings.EqualFold(f[0], "Host") {
			skip = len(f) == 2 && f[1] == run
			if skip && !replaced {
				out, replaced = append(out, block), true
			}
		}
		if !skip {
			out = append(out, line)
		}
	}
	if !replaced {
		out = append(out, block)
	}
	return strings.Join(out, "")
}

// includeFrom adds "Include path" at the top of ~/.ssh/config (where an
// Include applies to every host) unless it is there.
func includeFrom(path string) error {
	home, err := os.UserHomeDir()
	if err != nil {
		return err
	}
	sshDir := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(sshDir, 0o700); err != nil {
		return err
	}
	user := filepath.Join(sshDir, "config")
	old, err := os.ReadFile(user)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	line := "Include " + quoteSSH(path)
	for _, l := range strings.Split(string(old), "\n") {
		if strings.TrimSpace(l) == line {
			return nil
		}
	}
	return atomicfile.WriteFile(user, []byte(line+"\n\n"+string(old)), 0o600)
}

// quoteSSH quotes a word of ssh_config when it holds a space.
func quoteSSH(s string) string {
	if strings.ContainsAny(s, " \t\"") {
		return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
	}
	return s
}
