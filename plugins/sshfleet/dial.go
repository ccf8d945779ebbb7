package sshfleet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"gpud.dev/gpud/api"
)

// DefaultDialTimeout bounds one SSH connection attempt (TCP and handshake).
const DefaultDialTimeout = 15 * time.Second

// Target is one host of an SSH fleet with every setting resolved: empty
// per-host fields have already inherited the fleet's ssh_config.
type Target struct {
	// Name identifies the host in the fleet (its hostname as written).
	Name         string
	Hostname     string
	Port         int    // 22 when unset
	User         string // root when unset
	IdentityFile string // private key file; "~/" is the server user's home
	// ProxyJump is the bastion the host is reached through, or nil.
	ProxyJump *Jump
	// Blocks splits the host; nil means the fleet's.
	Blocks *api.Blocks
	// InternalIP is the address other hosts reach this one at, if set.
	InternalIP string
	// VolumePrefixes are where the fleet's admin lets jobs mount instance
	// volumes on the host (the agent's --allow-volume-prefix).
	VolumePrefixes []string
}

// AgentArgs are the `gpud agent` flags the target's own settings add.
func (t Target) AgentArgs() []string {
	var out []string
	for _, p := range t.VolumePrefixes {
		out = append(out, "--allow-volume-prefix", p)
	}
	return out
}

// Jump is a bastion host (ssh -J).
type Jump struct {
	Hostname     string
	Port         int
	User         string
	IdentityFile string
}

// Addr is "hostname:port" with the defaults applied, the key host keys are
// pinned under.
func (t Target) Addr() string { return hostPort(t.Hostname, t.Port) }

func hostPort(host string, port int) string {
	if port == 0 {
		port = 22
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Targets resolves a fleet's ssh_config into one Target per host: host
// fields win over the fleet's, proxy_jump fields inherit the fleet's user
// and identity file.
func Targets(c *api.SSHConfig) []Target {
	if c == nil {
		return nil
	}
	ts := make([]Target, 0, len(c.Hosts))
	for _, h := range c.Hosts {
		t := Target{
			Name: h.Hostname, Hostname: h.Hostname, Port: h.Port, User: orDefault(h.User, c.User),
			IdentityFile: orDefault(h.IdentityFile, c.IdentityFile), Blocks: h.Blocks, InternalIP: h.InternalIP,
			VolumePrefixes: c.VolumePrefixes,
		}
		if t.Port == 0 {
			t.Port = c.Port
		}
		jump := h.ProxyJump
		if jump == nil {
			jump = c.ProxyJump
		}
		if jump != nil {
			t.ProxyJump = &Jump{Hostname: jump.Hostname, Port: jump.Port, User: orDefault(jump.User, t.User),
				IdentityFile: orDefault(jump.IdentityFile, t.IdentityFile)}
		}
		ts = append(ts, t)
	}
	return ts
}

// Dialer opens SSH connections to targets, checking host keys against
// Keys. It is safe for concurrent use.
type Dialer struct {
	// Keys pins host keys; required.
	Keys HostKeyStore
	// Signers are tried after a target's identity file (the server's own
	// keys, or keys kept in its store).
	Signers []ssh.Signer
	// Timeout bounds each connection attempt; DefaultDialTimeout if zero.
	Timeout time.Duration
	// AcceptKeyHint ends a changed-host-key error: how an operator accepts
	// the new key. Empty uses a generic hint.
	AcceptKeyHint string
}

// Dial connects to t, through its proxy jump when it has one. Every hop's
// host key is checked against the store (pinned on first use). ctx bounds
// the whole dial, as does d.Timeout.
func (d *Dialer) Dial(ctx context.Context, t Target) (*ssh.Client, error) {
	timeout := d.Timeout
	if timeout == 0 {
		timeout = DefaultDialTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if t.ProxyJump == nil {
		var nd net.Dialer
		conn, err := nd.DialContext(ctx, "tcp", t.Addr())
		if err != nil {
			return nil, fmt.Errorf("ssh %s: %w", t.Addr(), err)
		}
		return d.handshake(ctx, conn, t.Addr(), t.User, t.IdentityFile)
	}
	j := t.ProxyJump
	jt := Target{Hostname: j.Hostname, Port: j.Port, User: j.User, IdentityFile: j.IdentityFile}
	bastion, err := d.Dial(ctx, jt)
	if err != nil {
		return nil, fmt.Errorf("ssh %s via proxy_jump: %w", t.Addr(), err)
	}
	conn, err := bastion.DialContext(ctx, "tcp", t.Addr())
	if err != nil {
		bastion.Close()
		return nil, fmt.Errorf("ssh %s via proxy_jump %s: %w", t.Addr(), jt.Addr(), err)
	}
	c, err := d.handshake(ctx, conn, t.Addr(), t.User, t.IdentityFile)
	if err != nil {
		bastion.Close()
		return nil, err
	}
	// The bastion connection lives as long as the host's.
	go func() { c.Wait(); bastion.Close() }()
	return c, nil
}

// handshake runs the SSH handshake on conn; ctx ending closes conn.
func (d *Dialer) handshake(ctx context.Context, conn net.Conn, addr, user, identity string) (*ssh.Client, error) {
	signers := d.Signers
	if identity != "" {
		s, err := loadIdentity(identity)
		if err != nil {
			conn.Close()
			return nil, err
		}
		signers = append([]ssh.Signer{s}, signers...)
	}
	if len(signers) == 0 {
		conn.Close()
		return nil, fmt.Errorf("ssh %s: no key: set identity_file in the fleet's ssh_config", addr)
	}
	cfg := &ssh.ClientConfig{
		User:            orDefault(user, "root"),
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signers...)},
		HostKeyCallback: pinningCallback(ctx, d.Keys, d.AcceptKeyHint),
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ssh %s: handshake: %w", addr, ctx.Err())
		}
		return nil, fmt.Errorf("ssh %s: %w", addr, err)
	}
	return ssh.NewClient(c, chans, reqs), nil
}

// loadIdentity reads an unencrypted private key file.
func loadIdentity(path string) (ssh.Signer, error) {
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("identity_file %s: %w", path, err)
		}
		path = filepath.Join(home, rest)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity_file: %w", err)
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("identity_file %s: %w (passphrase-protected keys are not supported: use a key without one, kept readable only by the server's user)", path, err)
	}
	return s, nil
}
