package daemon

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	agentclient "gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/agent/tunnel"
	"gpud.dev/gpud/store"
)

// Bare-metal registration: with Options.RegistrationListen set, the
// server serves tunnel.ConnectPath over TLS on that address. Agents started
// with `GPUD_AGENT_TOKEN=T gpud agent --server https://ADDR` join the
// token's fleet as instances with backend "registration", reached through
// their tunnel, under an id the server assigns (hosts_keys.go) and bound to
// the key they prove. Tokens are per fleet, stored as hashes in the
// store's KV namespace, and revocable (revoking also drops the tunnels
// registered with them and forgets their hosts' keys). A shared fleet's
// tokens are the global admins' to issue and revoke; a project's tokens
// go with its fleet, and its fleets must go before the project does.

// RegistrationCAFile is the PEM certificate agents pass as --server-ca when
// the server made its own self-signed registration certificate.
const RegistrationCAFile = "registration-ca.pem"

// regTokenRecord is a registration token's record in the KV namespace.
type regTokenRecord struct {
	Fleet   string `json:"fleet"`
	Project string `json:"project"`
	ID      string `json:"id"`
	Revoked bool   `json:"revoked,omitempty"`
}

func regTokenKey(hash string) string { return "registration/tokens/" + hash }
func regIDKey(id string) string      { return "registration/ids/" + id }

// kvTokens checks registration tokens against the store.
type kvTokens struct{ store *store.Store }

// CheckRegistrationToken implements tunnel.TokenChecker. A token
// whose fleet is gone, or no longer belongs to the token's project, is
// unknown: it admits hosts into its own fleet only, and dies with it.
func (k kvTokens) CheckRegistrationToken(ctx context.Context, token string) (tunnel.Grant, error) {
	sum := sha256.Sum256([]byte(token))
	b, err := k.store.KV().Load(ctx, regTokenKey(hex.EncodeToString(sum[:])))
	if errors.Is(err, fs.ErrNotExist) {
		return tunnel.Grant{}, tunnel.ErrTokenUnknown
	}
	if err != nil {
		return tunnel.Grant{}, err
	}
	var rec regTokenRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return tunnel.Grant{}, fmt.Errorf("registration token record: %w", err)
	}
	if rec.Revoked {
		return tunnel.Grant{}, tunnel.ErrTokenRevoked
	}
	if f, err := k.store.Fleets().Get(rec.Fleet); err != nil || f.Project != rec.Project {
		return tunnel.Grant{}, fmt.Errorf("%w: its fleet %q is gone", tunnel.ErrTokenUnknown, rec.Fleet)
	}
	return tunnel.Grant{Fleet: rec.Fleet, TokenID: rec.ID}, nil
}

// startRegistration listens for agent tunnels on Options.RegistrationListen.
func (s *hosts) startRegistration() error {
	if s.opts.RegistrationListen == "" {
		return nil
	}
	cert, err := s.registrationCert()
	if err != nil {
		return err
	}
	s.registration = &tunnel.Acceptor{Tokens: kvTokens{s.store}, Hosts: &storeHosts{s: s.Server}, Logger: s.log,
		KeepaliveInterval: s.opts.SSHHealth.KeepaliveInterval,
		OnConnect: func(a *tunnel.Agent) {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.registerTunnelAgent(a)
			}()
		},
		OnDisconnect: func(a *tunnel.Agent) {
			if s.ctx.Err() != nil || s.registration.Agent(a.Fleet, a.Host) != nil {
				return // the server is closing, or a newer tunnel of the host replaced this one
			}
			s.hostUnreachable(s.ctx, a.Instance, "registration tunnel closed")
			f, err := s.store.Fleets().Get(a.Fleet)
			if err != nil {
				return // the fleet was deleted, with its instances
			}
			if _, err := s.store.Apply(context.WithoutCancel(s.ctx), s.event(f.Project, store.KindInstance, a.Instance, "unreachable", "registration tunnel closed")); err != nil {
				s.log.Warn().Err(err).Str("host", a.Host).Msg("record tunnel event")
			}
			s.setInstanceHealth(a.Instance, "unreachable: registration tunnel closed")
		},
	}
	mux := http.NewServeMux()
	mux.Handle(tunnel.ConnectPath, s.registration)
	// RequestClientCert: the agent's self-signed host key is not verified
	// against a CA; the handshake proves the agent holds it, and the
	// acceptor binds the host name to it. An agent without a key gets the
	// acceptor's message instead of a bare handshake failure.
	ln, err := tls.Listen("tcp", s.opts.RegistrationListen, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12, ClientAuth: tls.RequestClientCert})
	if err != nil {
		return fmt.Errorf("registration listen %s: %w", s.opts.RegistrationListen, err)
	}
	s.registrationURL = "https://" + ln.Addr().String()
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Str("listen", s.opts.RegistrationListen).Msg("registration listener stopped; agents cannot connect")
		}
	}()
	s.registrationHTTP = hs
	s.log.Info().Str("url", s.registrationURL).Msg("accepting agent registrations")
	return nil
}

// registerTunnelAgent records a registered host as an instance.
func (s *hosts) registerTunnelAgent(a *tunnel.Agent) {
	cl, err := agentclient.New(tunnel.BaseURL, a.Token, a.HTTPClient())
	if err != nil {
		s.log.Warn().Err(err).Str("fleet", a.Fleet).Str("host", a.Host).Msg("register tunnel agent")
		a.Close()
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	info, err := cl.Host(ctx)
	if err == nil {
		err = s.registerInstance(ctx, a.Fleet, a.Instance, "registration", info, cl)
	}
	if err != nil {
		s.log.Warn().Err(err).Str("fleet", a.Fleet).Str("host", a.Host).Msg("register tunnel agent")
		a.Close()
		return
	}
	// Jobs moved while the host was away are stopped; its others watched.
	s.hostBack(s.agents.get(a.Instance))
}

// registrationCert loads the configured certificate, or makes (once) and
// reuses a self-signed one in the data dir, with its CA file for agents.
func (s *hosts) registrationCert() (tls.Certificate, error) {
	if s.opts.RegistrationCert != "" {
		return tls.LoadX509KeyPair(s.opts.RegistrationCert, s.opts.RegistrationKey)
	}
	certFile, keyFile := filepath.Join(s.opts.DataDir, RegistrationCAFile), filepath.Join(s.opts.DataDir, "registration-key.pem")
	if c, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	host, err := os.Hostname()
	if err != nil {
		host = "localhost" // the certificate then names loopback only; --registration-cert names more
	}
	// A certificate's validity is checked by its peers against their wall
	// clocks, so it is the one place that does not use the server's Clock.
	wall := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(wall.UnixNano()), Subject: pkix.Name{CommonName: "gpud registration"},
		NotBefore: wall.Add(-time.Hour), NotAfter: wall.AddDate(10, 0, 0), DNSNames: []string{"localhost", host},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	if h, _, err := net.SplitHostPort(s.opts.RegistrationListen); err == nil {
		if ip := net.ParseIP(h); ip != nil && !ip.IsUnspecified() {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" && ip == nil {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return tls.Certificate{}, err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return tls.Certificate{}, err
	}
	return tls.LoadX509KeyPair(certFile, keyFile)
}

// fleetTokenMutations returns the mutations that delete fleetID's
// registration tokens and its hosts' key bindings, for deleting the fleet.
// After they apply, dropFleetTunnels closes its hosts' tunnels; the
// agents cannot come back, their tokens being gone.
func (s *hosts) fleetTokenMutations(ctx context.Context, fleetID string) ([]store.Mutation, error) {
	muts := []store.Mutation{store.KVDelete(regHostsDir(fleetID))}
	toks, err := s.tokenRecords(ctx)
	if err != nil {
		return nil, err
	}
	for hash, rec := range toks {
		if rec.Fleet == fleetID {
			muts = append(muts, store.KVDelete(regTokenKey(hash)), store.KVDelete(regIDKey(rec.ID)))
		}
	}
	return muts, nil
}

// projectTokenMutations deletes every registration token recorded for
// project, whatever its fleet (tokens a project's manager once issued for
// a fleet that is gone, or for the shared fleet before only admins could).
func (s *hosts) projectTokenMutations(ctx context.Context, project string) ([]store.Mutation, error) {
	toks, err := s.tokenRecords(ctx)
	if err != nil {
		return nil, err
	}
	var muts []store.Mutation
	for hash, rec := range toks {
		if rec.Project == project {
			muts = append(muts, store.KVDelete(regTokenKey(hash)), store.KVDelete(regIDKey(rec.ID)))
		}
	}
	return muts, nil
}

// tokenRecords reads every registration token record by hash.
func (s *hosts) tokenRecords(ctx context.Context) (map[string]regTokenRecord, error) {
	keys, err := s.store.KV().List(ctx, "registration/tokens", false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]regTokenRecord{}
	for _, k := range keys {
		b, err := s.store.KV().Load(ctx, k)
		if err != nil {
			return nil, err
		}
		var rec regTokenRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("registration token record %s: %w", k, err)
		}
		out[strings.TrimPrefix(k, "registration/tokens/")] = rec
	}
	return out, nil
}

// dropFleetTunnels closes the tunnels of fleetID's registered hosts.
func (s *hosts) dropFleetTunnels(fleetID string) {
	if s.registration != nil {
		s.registration.DropFleet(fleetID)
	}
}
