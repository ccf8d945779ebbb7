// The server's end of the tunnel: Acceptor is an http.Handler for
// ConnectPath that checks a fleet's registration token, takes over the TLS
// connection, runs a yamux session on it and hands the server one
// http.RoundTripper per registered host, whose requests travel back to the
// agent over that connection.
//
// Identity: the agent presents its host key (KeyFile) as the TLS client
// certificate, so the handshake proves it holds the key. A host name
// within a fleet is bound to the first key that registers it
// (HostBinder); another key claiming that name is refused before anything
// else happens, so it can never displace the host that holds the name.
// The binder also assigns the host's instance id, which the agent never
// chooses. Tokens are checked through TokenChecker and names bound through
// HostBinder, which the server backs with its store (daemon/registration.go,
// daemon/hostkeys.go); Tokens and MemoryHosts keep them in memory.

package tunnel

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/rs/zerolog"
)

// Errors a TokenChecker returns for tokens that must not register.
var (
	ErrTokenUnknown = errors.New("unknown registration token")
	ErrTokenRevoked = errors.New("registration token revoked")
)

// ErrHostKeyMismatch is what a HostBinder returns when the host name is
// bound to another key in the fleet.
var ErrHostKeyMismatch = errors.New("the host name is registered in this fleet with another key")

// Grant is what a valid registration token allows.
type Grant struct {
	Fleet   string
	TokenID string // names the token (never the token itself), for revocation
}

// HostClaim is one registration's claim: the host name, in the grant's
// fleet, for the key the TLS handshake proved.
type HostClaim struct {
	Grant Grant
	// Host is the registered name, lower case (see validHost).
	Host string
	// Key is the fingerprint of the proved key (Fingerprint).
	Key        string
	RemoteAddr string
}

// HostBinder binds host names to keys; safe for concurrent use.
type HostBinder interface {
	// BindHost binds c.Host in c.Grant.Fleet to c.Key if the name is
	// new there, and returns the host's instance id (assigned by the
	// binder, never by the agent). A name bound to another key is an
	// error wrapping ErrHostKeyMismatch whose text says how to proceed.
	BindHost(ctx context.Context, c HostClaim) (instance string, err error)
}

// MemoryHosts is an in-memory HostBinder; instance ids are "fleet/host".
// The server keeps the same bindings in its store.
type MemoryHosts struct {
	mu   sync.Mutex
	keys map[string]string // fleet/host -> key fingerprint
}

// BindHost implements HostBinder.
func (m *MemoryHosts) BindHost(_ context.Context, c HostClaim) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keys == nil {
		m.keys = map[string]string{}
	}
	k := fleetHost(c.Grant.Fleet, c.Host)
	if have, ok := m.keys[k]; ok && have != c.Key {
		return "", fmt.Errorf("host %q: %w", c.Host, ErrHostKeyMismatch)
	}
	m.keys[k] = c.Key
	return k, nil
}

// hostPattern is what a registered host name may look like once lower
// cased: a DNS name or a short hostname, at most 253 bytes. It keeps names
// usable in store keys and instance ids ('/' never appears).
var hostPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,252}$`)

// validHost returns the host name as it is bound (lower case: host names
// are case-insensitive, so "VM" and "vm" are one name), or an error.
func validHost(h string) (string, error) {
	h = strings.ToLower(h)
	if !hostPattern.MatchString(h) || strings.Contains(h, "..") {
		return "", fmt.Errorf("host name %q: use letters, digits, '.', '-' and '_' (at most 253), or set `gpud agent --hostname`", h)
	}
	return h, nil
}

// TokenChecker validates registration tokens; safe for concurrent use.
type TokenChecker interface {
	// CheckRegistrationToken returns the token's grant, or an error
	// wrapping ErrTokenUnknown or ErrTokenRevoked.
	CheckRegistrationToken(ctx context.Context, token string) (Grant, error)
}

// Tokens is an in-memory TokenChecker that keeps only SHA-256 hashes of
// the tokens it issues. The server keeps the same records in its store.
type Tokens struct {
	mu     sync.Mutex
	byHash map[string]*tokenRecord
	byID   map[string]*tokenRecord
}

type tokenRecord struct {
	grant   Grant
	revoked bool
}

// Issue creates a token for fleet; the token is returned once and only its
// hash is kept.
func (t *Tokens) Issue(fleet string) (token, id string, err error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", "", fmt.Errorf("registration token: %w", err)
	}
	token = "gpudreg_" + hex.EncodeToString(raw)
	sum := sha256.Sum256([]byte(token))
	id = hex.EncodeToString(sum[:6])
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byHash == nil {
		t.byHash, t.byID = map[string]*tokenRecord{}, map[string]*tokenRecord{}
	}
	rec := &tokenRecord{grant: Grant{Fleet: fleet, TokenID: id}}
	t.byHash[hex.EncodeToString(sum[:])], t.byID[id] = rec, rec
	return token, id, nil
}

// Revoke makes the token with id unusable for new registrations.
func (t *Tokens) Revoke(id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	rec, ok := t.byID[id]
	if !ok {
		return fmt.Errorf("revoke %s: %w", id, ErrTokenUnknown)
	}
	rec.revoked = true
	return nil
}

// CheckRegistrationToken implements TokenChecker.
func (t *Tokens) CheckRegistrationToken(_ context.Context, token string) (Grant, error) {
	sum := sha256.Sum256([]byte(token))
	t.mu.Lock()
	defer t.mu.Unlock()
	rec, ok := t.byHash[hex.EncodeToString(sum[:])]
	switch {
	case !ok:
		return Grant{}, ErrTokenUnknown
	case rec.revoked:
		return Grant{}, ErrTokenRevoked
	}
	return rec.grant, nil
}

// Agent is one registered host. Its transport reaches the agent API only
// through the host's tunnel.
type Agent struct {
	Fleet string
	Host  string
	// Instance is the id the HostBinder assigned to the host.
	Instance string
	// Key is the fingerprint of the key the host proved.
	Key     string
	TokenID string
	// Token is the agent API bearer token the agent sent; never log it.
	Token       string
	RemoteAddr  string
	ConnectedAt time.Time

	session   *yamux.Session
	transport *http.Transport
}

// BaseURL is the base URL to use with HTTPClient (the host is ignored).
const BaseURL = "http://agent"

// HTTPClient returns a client whose every connection is a stream of the
// agent's tunnel.
func (a *Agent) HTTPClient() *http.Client { return &http.Client{Transport: a.transport} }

// Transport is HTTPClient's round tripper.
func (a *Agent) Transport() http.RoundTripper { return a.transport }

// Done is closed when the tunnel is gone (agent left, keepalive failed,
// or Close).
func (a *Agent) Done() <-chan struct{} { return a.session.CloseChan() }

// Ping measures one round trip through the tunnel.
func (a *Agent) Ping() (time.Duration, error) { return a.session.Ping() }

// Close drops the tunnel; the agent will dial again unless its token was
// revoked.
func (a *Agent) Close() error {
	a.transport.CloseIdleConnections()
	return a.session.Close()
}

// Acceptor accepts agent tunnels. Mount it at ConnectPath on the
// server's TLS listener. All methods are safe for concurrent use.
type Acceptor struct {
	Tokens TokenChecker
	// Hosts binds names to keys; nil keeps the bindings in memory
	// (MemoryHosts), which a restart forgets.
	Hosts HostBinder
	// KeepaliveInterval pings each tunnel; one silent for three intervals
	// is closed (default 5 s: a lost host is noticed within 20 s).
	KeepaliveInterval time.Duration
	// OnConnect and OnDisconnect are told about hosts coming and going;
	// they may be nil and must not block for long.
	OnConnect    func(*Agent)
	OnDisconnect func(*Agent)
	Logger       zerolog.Logger

	mu       sync.Mutex
	agents   map[string]*Agent // fleet/host
	memHosts MemoryHosts
}

// ServeHTTP validates the token and upgrades the connection.
func (ac *Acceptor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !strings.EqualFold(r.Header.Get("Upgrade"), Protocol) {
		http.Error(w, "expected an Upgrade: "+Protocol+" request from `gpud agent --server`", http.StatusBadRequest)
		return
	}
	if r.TLS == nil {
		http.Error(w, "registration is only accepted over TLS", http.StatusForbidden)
		return
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	host, agentToken := r.Header.Get(HeaderHost), r.Header.Get(HeaderAgentToken)
	if !ok || token == "" || host == "" || agentToken == "" {
		http.Error(w, "a registration token, a host name and an agent token are required", http.StatusUnauthorized)
		return
	}
	grant, err := ac.Tokens.CheckRegistrationToken(r.Context(), token)
	if err != nil {
		ac.Logger.Warn().Str("host", host).Str("remote", r.RemoteAddr).Err(err).Msg("registration refused")
		http.Error(w, "registration refused: "+err.Error()+"; ask the fleet's admin for a new token", http.StatusUnauthorized)
		return
	}
	if host, err = validHost(host); err != nil {
		http.Error(w, "registration refused: "+err.Error(), http.StatusForbidden)
		return
	}
	if len(r.TLS.PeerCertificates) == 0 {
		http.Error(w, "registration refused: the agent presented no host key; this server binds each host to the key in "+
			"its data dir ("+KeyFile+"), which gpud agent sends since this version: upgrade gpud on the host", http.StatusUnauthorized)
		return
	}
	claim := HostClaim{Grant: grant, Host: host, Key: Fingerprint(r.TLS.PeerCertificates[0]), RemoteAddr: r.RemoteAddr}
	hosts := ac.Hosts
	if hosts == nil {
		hosts = &ac.memHosts
	}
	instance, err := hosts.BindHost(r.Context(), claim)
	if err != nil {
		ac.Logger.Warn().Str("fleet", grant.Fleet).Str("host", host).Str("key", claim.Key).Str("remote", r.RemoteAddr).Err(err).Msg("registration refused")
		status := http.StatusServiceUnavailable
		if errors.Is(err, ErrHostKeyMismatch) {
			status = http.StatusForbidden
		}
		http.Error(w, "registration refused: "+err.Error(), status)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot take over the connection: "+err.Error(), http.StatusInternalServerError)
		return
	}
	conn.SetDeadline(time.Time{}) // the server's timeouts must not end the tunnel
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + Protocol + "\r\n\r\n"); err == nil {
		err = brw.Flush()
	}
	if err != nil {
		conn.Close()
		return
	}
	var rw net.Conn = conn
	if brw.Reader.Buffered() > 0 {
		rw = &bufferedConn{Conn: conn, r: brw.Reader}
	}
	interval := ac.KeepaliveInterval
	if interval == 0 {
		interval = 5 * time.Second
	}
	session, err := yamux.Client(rw, SessionConfig(interval))
	if err != nil {
		conn.Close()
		return
	}
	a := &Agent{Fleet: grant.Fleet, Host: host, Instance: instance, Key: claim.Key, TokenID: grant.TokenID, Token: agentToken,
		RemoteAddr: r.RemoteAddr, ConnectedAt: time.Now(), session: session}
	a.transport = &http.Transport{
		DialContext:         func(context.Context, string, string) (net.Conn, error) { return session.Open() },
		MaxIdleConnsPerHost: 8, IdleConnTimeout: 90 * time.Second,
	}
	ac.add(a)
	go ac.watch(a)
}

func fleetHost(fleet, host string) string { return fleet + "/" + host }

// add registers a, replacing (and closing) an older tunnel of the host:
// the binder has already checked that a holds the same key, so this is
// the same host reconnecting before its old tunnel was noticed gone.
func (ac *Acceptor) add(a *Agent) {
	ac.mu.Lock()
	if ac.agents == nil {
		ac.agents = map[string]*Agent{}
	}
	old := ac.agents[fleetHost(a.Fleet, a.Host)]
	ac.agents[fleetHost(a.Fleet, a.Host)] = a
	ac.mu.Unlock()
	if old != nil {
		old.Close()
	}
	ac.Logger.Info().Str("fleet", a.Fleet).Str("host", a.Host).Str("remote", a.RemoteAddr).Msg("agent registered")
	if ac.OnConnect != nil {
		ac.OnConnect(a)
	}
}

// watch removes a when its tunnel closes.
func (ac *Acceptor) watch(a *Agent) {
	<-a.Done()
	a.transport.CloseIdleConnections()
	ac.mu.Lock()
	current := ac.agents[fleetHost(a.Fleet, a.Host)] == a
	if current {
		delete(ac.agents, fleetHost(a.Fleet, a.Host))
	}
	ac.mu.Unlock()
	ac.Logger.Info().Str("fleet", a.Fleet).Str("host", a.Host).Bool("replaced", !current).Msg("agent tunnel closed")
	if ac.OnDisconnect != nil {
		ac.OnDisconnect(a)
	}
}

// Agent returns the connected host of fleet, or nil.
func (ac *Acceptor) Agent(fleet, host string) *Agent {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	return ac.agents[fleetHost(fleet, host)]
}

// Agents lists the connected hosts.
func (ac *Acceptor) Agents() []*Agent {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	out := make([]*Agent, 0, len(ac.agents))
	for _, a := range ac.agents {
		out = append(out, a)
	}
	return out
}

// DropToken closes the tunnels registered with tokenID (call it after
// revoking the token, so its hosts cannot stay connected) and returns how
// many it closed.
func (ac *Acceptor) DropToken(tokenID string) int {
	n := 0
	for _, a := range ac.Agents() {
		if a.TokenID == tokenID {
			a.Close()
			n++
		}
	}
	return n
}

// DropFleet closes the tunnels of fleet's hosts (call it when the fleet is
// deleted, after its tokens are gone) and returns how many it closed.
func (ac *Acceptor) DropFleet(fleet string) int {
	n := 0
	for _, a := range ac.Agents() {
		if a.Fleet == fleet {
			a.Close()
			n++
		}
	}
	return n
}
