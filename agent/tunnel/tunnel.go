// Package tunnel is bare-metal registration, both ends of it. The agent's
// end (Serve, Dial): `gpud agent --server URL` dials the server over TLS,
// presents its host key (LoadOrCreateKey), upgrades the HTTP connection to
// the gpud tunnel protocol with the fleet's registration token, and then
// serves the agent API to the server over that one connection,
// multiplexed with yamux. The agent needs no open port, so hosts behind
// NAT join. The server's end (Acceptor, accept.go) checks the token and
// the key, and hands the server an http.RoundTripper to each host's agent.
// The wire protocol (ConnectPath, Protocol, the headers, SessionConfig)
// is defined once, here.
//
// tunnel must not import daemon, store, sched, plugins or proxy: the
// server reaches its store through TokenChecker and HostBinder.
package tunnel

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
)

// Protocol constants both ends share.
const (
	// ConnectPath is the server endpoint agents upgrade.
	ConnectPath = "/api/v1/agents/connect"
	// Protocol is the Upgrade token.
	Protocol = "gpud-tunnel/1"
	// HeaderHost names the registering host.
	HeaderHost = "Gpud-Host"
	// HeaderAgentToken carries the agent API token the server must send
	// back on every request through the tunnel.
	HeaderAgentToken = "Gpud-Agent-Token"
)

// ErrRejected is returned by Serve when the server refused the
// registration token (unknown or revoked): retrying cannot help.
var ErrRejected = errors.New("registration refused")

// Config says where to register and what to serve.
type Config struct {
	// ServerURL is the server's https:// base URL.
	ServerURL string
	// Token is the fleet's registration token; never logged.
	Token string
	// Host is the name to register as (the hostname by default). The
	// server binds it, within the token's fleet, to Key.
	Host string
	// Key is the host's identity (LoadOrCreateKey), presented as the TLS
	// client certificate: the handshake proves the agent holds it.
	Key tls.Certificate
	// AgentToken is the agent API's bearer token, handed to the server
	// over the TLS connection so it can call Handler.
	AgentToken string
	// Handler is the agent API (agent/server.New).
	Handler http.Handler
	// TLS verifies the server; nil uses the system roots.
	TLS *tls.Config
	// KeepaliveInterval is how often the tunnel is pinged; 5 s if zero. A
	// tunnel silent for 3 intervals is dropped and dialed again.
	KeepaliveInterval time.Duration
	// MaxBackoff caps the wait between reconnections; 30 s if zero.
	MaxBackoff time.Duration
	Logger     zerolog.Logger
}

// Serve keeps the agent registered until ctx ends: it connects, serves the
// agent API over the tunnel until the connection drops, and reconnects
// with exponential backoff. It returns nil when ctx ends (a clean stop),
// or an error wrapping ErrRejected when the server refuses the token.
func Serve(ctx context.Context, cfg Config) error {
	u, err := url.Parse(cfg.ServerURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("--server %q: use https://host:port (registration always runs over TLS)", cfg.ServerURL)
	}
	if cfg.Token == "" || cfg.AgentToken == "" || cfg.Handler == nil || len(cfg.Key.Certificate) == 0 {
		return errors.New("tunnel: a registration token, an agent token, a host key and a handler are required")
	}
	backoff := api.Backoff{First: 250 * time.Millisecond, Max: cfg.MaxBackoff}
	if backoff.Max == 0 {
		backoff.Max = 30 * time.Second
	}
	for retry := 1; ; retry++ {
		connected, err := serveOnce(ctx, u, cfg)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrRejected) {
			return err
		}
		if connected {
			retry = 1 // it was up: the next drop starts the backoff again
		}
		cfg.Logger.Warn().Err(err).Dur("retry_in", backoff.Delay(retry)).Msg("registration tunnel down")
		if !backoff.Sleep(ctx, retry) {
			return nil
		}
	}
}

// serveOnce dials, upgrades and serves until the tunnel closes; connected
// says whether the server accepted the registration.
func serveOnce(ctx context.Context, u *url.URL, cfg Config) (connected bool, err error) {
	conn, err := Dial(ctx, u, cfg)
	if err != nil {
		return false, err
	}
	interval := cfg.KeepaliveInterval
	if interval == 0 {
		interval = 5 * time.Second
	}
	ycfg := SessionConfig(interval)
	session, err := yamux.Server(conn, ycfg)
	if err != nil {
		conn.Close()
		return true, fmt.Errorf("tunnel: %w", err)
	}
	ev := cfg.Logger.Info().Str("server", u.Host).Str("host", cfg.Host)
	if cfg.Key.Leaf != nil {
		ev = ev.Str("key", Fingerprint(cfg.Key.Leaf))
	}
	ev.Msg("registered with the server")
	stop := context.AfterFunc(ctx, func() { session.Close() })
	defer stop()
	srv := &http.Server{Handler: cfg.Handler, ReadHeaderTimeout: 10 * time.Second}
	err = srv.Serve(session)
	session.Close()
	return true, fmt.Errorf("tunnel: %w", err)
}

// Dial opens the TLS connection and performs the upgrade; the returned
// connection carries the tunnel's bytes (yamux frames) from then on.
func Dial(ctx context.Context, u *url.URL, cfg Config) (net.Conn, error) {
	tcfg := &tls.Config{}
	if cfg.TLS != nil {
		tcfg = cfg.TLS.Clone()
	}
	tcfg.NextProtos = []string{"http/1.1"} // Upgrade needs HTTP/1.1, never h2
	// The key is sent whatever CAs the server names: it is self-signed,
	// and what the server checks is possession, not a chain.
	key := cfg.Key
	tcfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &key, nil }
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	d := &tls.Dialer{Config: tcfg}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("tunnel: dial %s: %w", host, err)
	}
	stop := context.AfterFunc(dctx, func() { conn.Close() })
	defer stop()
	req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(u.String(), "/")+ConnectPath, nil)
	req.Header.Set("Authorization", "Bearer "+cfg.Token)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", Protocol)
	req.Header.Set(HeaderHost, cfg.Host)
	req.Header.Set(HeaderAgentToken, cfg.AgentToken)
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("tunnel: %w", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("tunnel: upgrade: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		conn.Close()
		msg := strings.TrimSpace(string(body))
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			return nil, fmt.Errorf("%w by %s: %s: %s", ErrRejected, u.Host, resp.Status, msg)
		}
		return nil, fmt.Errorf("tunnel: upgrade: %s: %s", resp.Status, msg)
	}
	return &bufferedConn{Conn: conn, r: br}, nil
}

// SessionConfig is the yamux setup both ends share: keepalive pings every
// interval, a session silent for three intervals is closed.
func SessionConfig(interval time.Duration) *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = true
	c.KeepAliveInterval = interval
	c.ConnectionWriteTimeout = 3 * interval
	c.LogOutput = io.Discard
	return c
}

// bufferedConn reads what a reader of the upgrade (the agent's response
// reader, the server's hijacked one) had already buffered first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Flags are `gpud agent`'s registration settings.
type Flags struct {
	// Server is the https:// URL; ServerCA an optional PEM CA file.
	Server, ServerCA string
	// Token is the fleet's registration token (from GPUD_AGENT_TOKEN or
	// --token-file; --token works but shows it in ps).
	Token string
	// DataDir holds the host key (KeyFile).
	DataDir string
	// Host overrides the name registered (default: the hostname).
	Host string
}

// NewConfig is Config for `gpud agent --server URL [--server-ca FILE]`
// with the registration token from f: it reads the CA file (PEM) when
// given, so a server with a private CA is verified, loads (or makes) the
// host key in the data dir, and registers under the hostname.
func NewConfig(f Flags, agentToken string, h http.Handler, log zerolog.Logger) (Config, error) {
	if f.Token == "" {
		return Config{}, errors.New("--server needs the registration token the server's admin issued for the fleet: set GPUD_AGENT_TOKEN or --token-file FILE")
	}
	cfg := Config{ServerURL: f.Server, Token: f.Token, AgentToken: agentToken, Handler: h, Logger: log, Host: f.Host}
	if cfg.Host == "" {
		var err error
		if cfg.Host, err = os.Hostname(); err != nil {
			return Config{}, fmt.Errorf("hostname: %w; name the host with --hostname", err)
		}
	}
	if f.ServerCA != "" {
		pem, err := os.ReadFile(f.ServerCA)
		if err != nil {
			return Config{}, fmt.Errorf("--server-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return Config{}, fmt.Errorf("--server-ca %s: no PEM certificate in it", f.ServerCA)
		}
		cfg.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	key, err := LoadOrCreateKey(f.DataDir)
	if err != nil {
		return Config{}, err
	}
	cfg.Key = key
	return cfg, nil
}
