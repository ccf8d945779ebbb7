package sshfleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/crypto/ssh"

	"gpud.dev/gpud/api"
)

// DefaultReadyTimeout bounds how long Provision waits for a started agent
// to answer through the tunnel.
const DefaultReadyTimeout = 30 * time.Second

// ErrUnreachable is returned by requests through a Host whose SSH
// connection is down (see Monitor).
var ErrUnreachable = errors.New("host unreachable")

// ErrArchMismatch is matched by the error Provision returns when the host's
// architecture differs from the binary's.
var ErrArchMismatch = errors.New("architecture mismatch")

// Options says what Provision installs and how.
type Options struct {
	// Dialer connects to the hosts; required.
	Dialer *Dialer
	// Binary is the gpud executable to upload; os.Executable() if empty.
	Binary string
	// BinaryArch is Binary's GOARCH; runtime.GOARCH if empty.
	BinaryArch string
	// Dir is where the agent lives on the host; "/var/lib/gpud-agent" for
	// root, "$HOME/.gpud/agent" for other users if empty.
	Dir string
	// AgentArgs are extra `gpud agent` flags (--runtime, --fake-gpus).
	AgentArgs []string
	// ReadyTimeout bounds the wait for the agent; DefaultReadyTimeout if 0.
	ReadyTimeout time.Duration
	Logger       zerolog.Logger
}

// Host is one provisioned host: its SSH connection, the agent it started
// and the way to reach that agent. All methods are safe for concurrent use.
type Host struct {
	Target Target
	// Arch is the host's GOARCH, from uname -m.
	Arch string
	// Dir holds the binary, the agent's data, socket, pid file and log.
	Dir string
	// Socket is the agent's unix socket on the host (mode 0600).
	Socket string
	// Token is the agent API's bearer token; never log it.
	Token string
	// Supervisor is "systemd" or "process" (setsid + restart loop + pid file).
	Supervisor string
	// Info is what the agent reported once it answered.
	Info api.HostInfo

	dialer    *Dialer
	log       zerolog.Logger
	transport *http.Transport

	mu     sync.Mutex
	client *ssh.Client // nil while unreachable
}

// Provision connects to t, uploads the gpud binary unless the host already
// has the same one, (re)starts `gpud agent` on a unix socket under Dir and
// waits until the agent answers through the SSH connection. The agent's
// token travels over SSH's stdin into a 0600 file, never on a command line.
func Provision(ctx context.Context, t Target, o Options) (*Host, error) {
	log := o.Logger.With().Str("host", t.Name).Logger()
	client, err := o.Dialer.Dial(ctx, t)
	if err != nil {
		return nil, err
	}
	h := &Host{Target: t, dialer: o.Dialer, log: log, client: client}
	h.transport = &http.Transport{DialContext: h.dialAgent, MaxIdleConnsPerHost: 8, IdleConnTimeout: 90 * time.Second}
	if err := h.install(ctx, o); err != nil {
		client.Close()
		return nil, err
	}
	return h, nil
}

func (h *Host) install(ctx context.Context, o Options) error {
	probe, err := h.run(ctx, `uname -m; id -u; echo "$HOME"; if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then echo systemd; else echo process; fi`, nil)
	if err != nil {
		return fmt.Errorf("host %s: probe: %w", h.Target.Name, err)
	}
	f := strings.Fields(string(probe))
	if len(f) != 4 {
		return fmt.Errorf("host %s: probe printed %q, want machine, uid, home and init", h.Target.Name, probe)
	}
	h.Arch = goArch(f[0])
	want := o.BinaryArch
	if want == "" {
		want = goruntime.GOARCH
	}
	if h.Arch != want {
		return fmt.Errorf("host %s is %s (%s) but this gpud binary is built for %s: %w; run the server from a gpud built for %s (GOARCH=%s), or register the host with `gpud agent --server` using a matching binary",
			h.Target.Name, f[0], h.Arch, want, ErrArchMismatch, h.Arch, h.Arch)
	}
	root := f[1] == "0"
	h.Dir = o.Dir
	switch {
	case h.Dir != "":
	case root:
		h.Dir = "/var/lib/gpud-agent"
	default:
		h.Dir = f[2] + "/.gpud/agent"
	}
	h.Socket = h.Dir + "/agent.sock"
	h.Supervisor = "process"
	if root && f[3] == "systemd" {
		h.Supervisor = "systemd"
	}
	if err := h.upload(ctx, o.Binary); err != nil {
		return err
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return fmt.Errorf("agent token: %w", err)
	}
	h.Token = hex.EncodeToString(tok)
	if _, err := h.run(ctx, startScript(h.Dir, h.Supervisor, o.AgentArgs), strings.NewReader(h.Token+"\n")); err != nil {
		return fmt.Errorf("host %s: start agent: %w", h.Target.Name, err)
	}
	timeout := o.ReadyTimeout
	if timeout == 0 {
		timeout = DefaultReadyTimeout
	}
	if err := h.waitReady(ctx, timeout); err != nil {
		logTail, _ := h.run(ctx, "tail -n 20 "+shellQuote(h.Dir+"/agent.log")+" 2>/dev/null", nil)
		return fmt.Errorf("host %s: agent did not answer within %s: %w; agent.log: %s", h.Target.Name, timeout, err, logTail)
	}
	h.log.Info().Str("arch", h.Arch).Str("supervisor", h.Supervisor).Str("dir", h.Dir).Msg("agent ready")
	return nil
}

// upload copies the binary to Dir/gpud unless the host has the same bytes.
func (h *Host) upload(ctx context.Context, binary string) error {
	if binary == "" {
		var err error
		if binary, err = os.Executable(); err != nil {
			return fmt.Errorf("gpud binary: %w", err)
		}
	}
	b, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("gpud binary: %w", err)
	}
	sum := sha256.Sum256(b)
	d := shellQuote(h.Dir)
	have, _ := h.run(ctx, "sha256sum "+d+"/gpud 2>/dev/null || true", nil)
	if strings.HasPrefix(string(have), hex.EncodeToString(sum[:])) {
		h.log.Debug().Msg("gpud binary already current")
		return nil
	}
	script := fmt.Sprintf("set -e; umask 077; mkdir -p %[1]s; cat > %[1]s/gpud.new; chmod 755 %[1]s/gpud.new; mv -f %[1]s/gpud.new %[1]s/gpud", d)
	if _, err := h.run(ctx, script, bytes.NewReader(b)); err != nil {
		return fmt.Errorf("host %s: upload gpud: %w", h.Target.Name, err)
	}
	h.log.Info().Int("bytes", len(b)).Msg("uploaded gpud binary")
	return nil
}

// waitReady polls the agent's /healthz through the tunnel, then checks
// the token with the host info call.
func (h *Host) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := h.HTTPClient()
	var last error
	for {
		if last = h.getJSON(ctx, hc, "/api/v1/host", &h.Info); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (h *Host) getJSON(ctx context.Context, hc *http.Client, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, AgentBaseURL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+h.Token)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// AgentBaseURL is the base URL to give agent/client.New together with
// HTTPClient: the host part is ignored, every connection is dialed through
// the SSH connection to the agent's socket.
const AgentBaseURL = "http://agent"

// HTTPClient returns a client whose connections go only through the SSH
// connection to the agent's unix socket (direct-streamlocal); there is no
// other route to the agent. Requests fail with ErrUnreachable while the
// host is unreachable. Use it with AgentBaseURL and Token.
func (h *Host) HTTPClient() *http.Client { return &http.Client{Transport: h.transport} }

// Transport is HTTPClient's round tripper.
func (h *Host) Transport() http.RoundTripper { return h.transport }

func (h *Host) dialAgent(ctx context.Context, _, _ string) (net.Conn, error) {
	c := h.sshClient()
	if c == nil {
		return nil, fmt.Errorf("host %s: %w", h.Target.Name, ErrUnreachable)
	}
	conn, err := c.DialContext(ctx, "unix", h.Socket)
	if err != nil {
		return nil, fmt.Errorf("host %s: agent socket through ssh: %w", h.Target.Name, err)
	}
	return conn, nil
}

func (h *Host) sshClient() *ssh.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.client
}

// run runs a shell command on the host with stdin and returns its
// combined output; ctx ending closes the session.
func (h *Host) run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	c := h.sshClient()
	if c == nil {
		return nil, fmt.Errorf("host %s: %w", h.Target.Name, ErrUnreachable)
	}
	sess, err := c.NewSession()
	if err != nil {
		return nil, fmt.Errorf("ssh session: %w", err)
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	sess.Stdin = stdin
	out, err := sess.CombinedOutput(cmd)
	if err != nil {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		return out, fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
	}
	return out, nil
}

// swapClient makes c (nil: none) the host's SSH connection, drops the idle
// HTTP connections that ran through the previous one and returns that
// previous one (nil when there was none) for the caller to close.
func (h *Host) swapClient(c *ssh.Client) *ssh.Client {
	h.mu.Lock()
	old := h.client
	h.client = c
	h.mu.Unlock()
	h.transport.CloseIdleConnections()
	return old
}

// Close closes the SSH connection; the agent keeps running.
func (h *Host) Close() error {
	c := h.swapClient(nil)
	if c == nil {
		return nil
	}
	return c.Close()
}

// Teardown stops the agent (its jobs were the server's to stop first),
// removes its unit or pid file, binary and data, and closes the connection.
// A host that is unreachable is dialed once more first.
func (h *Host) Teardown(ctx context.Context) error {
	if h.sshClient() == nil { // unreachable a moment ago: try once more
		if err := h.Reconnect(ctx); err != nil {
			return fmt.Errorf("host %s: stop agent: %w", h.Target.Name, err)
		}
	}
	_, err := h.run(ctx, stopScript(h.Dir, h.Supervisor, true), nil)
	cerr := h.Close()
	if err != nil {
		return fmt.Errorf("host %s: stop agent: %w", h.Target.Name, err)
	}
	return cerr
}

// goArch maps `uname -m` to GOARCH.
func goArch(machine string) string {
	switch machine {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64", "armv8l":
		return "arm64"
	case "i386", "i686":
		return "386"
	}
	if strings.HasPrefix(machine, "armv") {
		return "arm"
	}
	return machine // ppc64le, s390x, riscv64 are spelled alike
}
