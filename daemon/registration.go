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
	"time"

	agentclient "gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/agent/tunnel"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins/registration"
	"gpud.dev/gpud/store"
)

// Bare-metal registration: with Options.RegistrationListen set, the
// server serves tunnel.ConnectPath over TLS on that address. Agents started
// with `gpud agent --server https://ADDR --token T` join the token's fleet
// as instances with backend "registration", reached through their tunnel.
// Tokens are per fleet, stored as hashes in the store's KV namespace, and
// revocable (revoking also drops the tunnels registered with them).

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
type kvTokens struct{ kv *store.KV }

func (k kvTokens) CheckRegistrationToken(ctx context.Context, token string) (registration.Grant, error) {
	sum := sha256.Sum256([]byte(token))
	b, err := k.kv.Load(ctx, regTokenKey(hex.EncodeToString(sum[:])))
	if errors.Is(err, fs.ErrNotExist) {
		return registration.Grant{}, registration.ErrTokenUnknown
	}
	if err != nil {
		return registration.Grant{}, err
	}
	var rec regTokenRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return registration.Grant{}, fmt.Errorf("registration token record: %w", err)
	}
	if rec.Revoked {
		return registration.Grant{}, registration.ErrTokenRevoked
	}
	return registration.Grant{Fleet: rec.Fleet, TokenID: rec.ID}, nil
}

// startRegistration listens for agent tunnels on Options.RegistrationListen.
func (s *Server) startRegistration() error {
	if s.opts.RegistrationListen == "" {
		return nil
	}
	cert, err := s.registrationCert()
	if err != nil {
		return err
	}
	s.registration = &registration.Acceptor{Tokens: kvTokens{s.store.KV()}, Logger: s.log,
		KeepaliveInterval: s.opts.SSHHealth.KeepaliveInterval,
		OnConnect: func(a *registration.Agent) {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.registerTunnelAgent(a)
			}()
		},
		OnDisconnect: func(a *registration.Agent) {
			if s.ctx.Err() != nil || s.registration.Agent(a.Fleet, a.Host) != nil {
				return // the server is closing, or a newer tunnel of the host replaced this one
			}
			s.hostUnreachable(s.ctx, tunnelInstanceID(a), "registration tunnel closed")
			f, _ := s.store.Fleets().Get(a.Fleet)
			if _, err := s.store.Apply(context.WithoutCancel(s.ctx), event(f.Project, store.KindInstance, tunnelInstanceID(a), "unreachable", "registration tunnel closed")); err != nil {
				s.log.Warn().Err(err).Str("host", a.Host).Msg("record tunnel event")
			}
			s.setInstanceHealth(tunnelInstanceID(a), "unreachable: registration tunnel closed")
		},
	}
	mux := http.NewServeMux()
	mux.Handle(tunnel.ConnectPath, s.registration)
	ln, err := tls.Listen("tcp", s.opts.RegistrationListen, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return fmt.Errorf("registration listen %s: %w", s.opts.RegistrationListen, err)
	}
	s.registrationURL = "https://" + ln.Addr().String()
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	s.registrationHTTP = hs
	s.log.Info().Str("url", s.registrationURL).Msg("accepting agent registrations")
	return nil
}

func tunnelInstanceID(a *registration.Agent) string {
	return sanitize(a.Fleet + "-" + a.Host)
}

// registerTunnelAgent records a registered host as an instance.
func (s *Server) registerTunnelAgent(a *registration.Agent) {
	cl, err := agentclient.New(registration.BaseURL, a.Token, a.HTTPClient())
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	info, err := cl.Host(ctx)
	if err == nil {
		err = s.registerInstance(ctx, a.Fleet, tunnelInstanceID(a), "registration", info, cl)
	}
	if err != nil {
		s.log.Warn().Err(err).Str("fleet", a.Fleet).Str("host", a.Host).Msg("register tunnel agent")
		a.Close()
		return
	}
	// Jobs moved while the host was away are stopped; its others watched.
	s.hostBack(s.agents.get(tunnelInstanceID(a)))
}

// registrationCert loads the configured certificate, or makes (once) and
// reuses a self-signed one in the data dir, with its CA file for agents.
func (s *Server) registrationCert() (tls.Certificate, error) {
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
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "gpud registration"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0), DNSNames: []string{"localhost", host},
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

// handleIssueRegistrationToken issues a token for a fleet (manager).
func (s *Server) handleIssueRegistrationToken(w http.ResponseWriter, r *http.Request) error {
	project, c, f, err := s.authorizedFleet(r, api.RoleManager)
	if err != nil {
		return err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	token := "gpudreg_" + hex.EncodeToString(raw)
	sum := sha256.Sum256([]byte(token))
	hash := hex.EncodeToString(sum[:])
	rec := regTokenRecord{Fleet: f.ID, Project: project, ID: hash[:12]}
	b, _ := json.Marshal(rec)
	if _, err := s.store.Apply(r.Context(), store.KVPut(regTokenKey(hash), b), store.KVPut(regIDKey(rec.ID), []byte(hash)),
		event(project, store.KindFleet, f.ID, "token_issued", "registration token "+rec.ID+" issued by "+c.name)); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.RegistrationToken{ID: rec.ID, Fleet: f.Name, Token: token})
	return nil
}

// handleRevokeRegistrationToken revokes a token and drops its tunnels.
func (s *Server) handleRevokeRegistrationToken(w http.ResponseWriter, r *http.Request) error {
	project, c, f, err := s.authorizedFleet(r, api.RoleManager)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	hash, err := s.store.KV().Load(r.Context(), regIDKey(id))
	if err != nil {
		return notFound("registration token", id)
	}
	b, err := s.store.KV().Load(r.Context(), regTokenKey(string(hash)))
	if err != nil {
		return notFound("registration token", id)
	}
	var rec regTokenRecord
	if json.Unmarshal(b, &rec) != nil || rec.Fleet != f.ID {
		return notFound("registration token", id)
	}
	rec.Revoked = true
	b, _ = json.Marshal(rec)
	if _, err := s.store.Apply(r.Context(), store.KVPut(regTokenKey(string(hash)), b),
		event(project, store.KindFleet, f.ID, "token_revoked", "registration token "+id+" revoked by "+c.name)); err != nil {
		return err
	}
	if s.registration != nil {
		s.registration.DropToken(id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// RegistrationURL is the https:// URL agents register at, "" when
// registration is off.
func (s *Server) RegistrationURL() string { return s.registrationURL }
