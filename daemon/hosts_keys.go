package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"gpud.dev/gpud/agent/tunnel"
	"gpud.dev/gpud/store"
)

// Registered hosts' identity (DESIGN.md §10): the first registration of a
// host name in a fleet binds the name to the key the agent proved in the
// TLS handshake, in the store's KV namespace; later registrations of the
// name must prove the same key. The instance id is assigned here, never
// taken from the agent: "reg/" + fleet record id + "/" + host name. Fleet
// record ids are "name" (shared) or "project/name", names never contain
// '/', and host names never do either (registration.validHost), so the id
// names exactly one host of one fleet; it cannot equal the local instance
// ("local-…"), an SSH host ("ssh/…") or a heartbeat name (no '/').

// hostBinding is a bound host name's record in the KV namespace.
type hostBinding struct {
	Fleet    string    `json:"fleet"`
	Host     string    `json:"host"`
	Key      string    `json:"key"` // tunnel.Fingerprint of the host key
	Instance string    `json:"instance"`
	TokenID  string    `json:"token_id"` // the token it last registered with
	BoundAt  time.Time `json:"bound_at"`
}

// regHostsDir holds the bindings of one fleet. The fleet id's '/' becomes
// ':' (which names never contain), so the shared fleet "local" and a
// project named "local" can never share a directory.
func regHostsDir(fleetID string) string {
	return "registration/hosts/" + strings.ReplaceAll(fleetID, "/", ":")
}

func regHostKey(fleetID, host string) string { return regHostsDir(fleetID) + "/" + host }

func registeredInstanceID(fleetID, host string) string { return "reg/" + fleetID + "/" + host }

// storeHosts is the server's tunnel.HostBinder.
type storeHosts struct {
	s *Server
	// mu makes each bind a check-and-set: two agents racing for one new
	// name cannot both win.
	mu sync.Mutex
}

var _ tunnel.HostBinder = (*storeHosts)(nil)

// BindHost implements tunnel.HostBinder.
func (h *storeHosts) BindHost(ctx context.Context, c tunnel.HostClaim) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	kv := h.s.store.KV()
	f, err := h.s.store.Fleets().Get(c.Grant.Fleet)
	if err != nil {
		return "", fmt.Errorf("fleet %q is gone: %w", c.Grant.Fleet, tunnel.ErrTokenUnknown)
	}
	key := regHostKey(c.Grant.Fleet, c.Host)
	var b hostBinding
	raw, err := kv.Load(ctx, key)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		b = hostBinding{Fleet: c.Grant.Fleet, Host: c.Host, Key: c.Key, Instance: registeredInstanceID(c.Grant.Fleet, c.Host), TokenID: c.Grant.TokenID, BoundAt: h.s.now()}
		if err := h.s.checkFleetRoom(c.Grant.Fleet, b.Instance); err != nil {
			return "", err // a new host; the fleet's admin capped how many it takes
		}
		if inst, err := h.s.store.Instances().Get(b.Instance); err == nil && inst.Fleet != c.Grant.Fleet {
			return "", fmt.Errorf("instance id %s is taken by fleet %q", b.Instance, inst.Fleet) // cannot happen by construction; never overwrite
		}
	case err != nil:
		return "", err
	default:
		if err := json.Unmarshal(raw, &b); err != nil {
			return "", fmt.Errorf("host binding %s: %w", key, err)
		}
		if b.Key != c.Key {
			reason := fmt.Sprintf("registration of host %q refused: it presented key %s from %s, but the name is bound to key %s",
				c.Host, short(c.Key), c.RemoteAddr, short(b.Key))
			if _, err := h.s.store.Apply(context.WithoutCancel(ctx), h.s.event(f.Project, store.KindInstance, b.Instance, "registration_refused", reason)); err != nil {
				h.s.log.Warn().Err(err).Str("host", c.Host).Msg("record refused registration")
			}
			return "", fmt.Errorf("host %q in fleet %q: %w (bound to %s, this agent has %s); the host keeps its key in DATA_DIR/registration-key.pem. "+
				"If this is a new machine, register it under another name (gpud agent --hostname); if it is the same machine reinstalled, "+
				"a manager revokes the token it registered with (token id %s), which forgets its key, and issues a new one",
				c.Host, f.Name, tunnel.ErrHostKeyMismatch, short(b.Key), short(c.Key), b.TokenID)
		}
		if b.TokenID == c.Grant.TokenID {
			return b.Instance, nil
		}
		b.TokenID = c.Grant.TokenID
	}
	out, err := json.Marshal(b)
	if err != nil {
		return "", err
	}
	if _, err := h.s.store.Apply(ctx, store.KVPut(key, out)); err != nil {
		return "", err
	}
	return b.Instance, nil
}

// short is a fingerprint cut to what a person compares.
func short(fp string) string {
	if len(fp) > 23 {
		return fp[:23] + "…"
	}
	return fp
}

// hostBindings lists the bindings of fleetID, or of every fleet when
// fleetID is "".
func (s *hosts) hostBindings(ctx context.Context, fleetID string) ([]hostBinding, []string, error) {
	dir := "registration/hosts"
	if fleetID != "" {
		dir = regHostsDir(fleetID)
	}
	keys, err := s.store.KV().List(ctx, dir, true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var out []hostBinding
	var at []string
	for _, k := range keys {
		raw, err := s.store.KV().Load(ctx, k)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a directory, or deleted meanwhile
		}
		if err != nil {
			return nil, nil, err
		}
		var b hostBinding
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, nil, fmt.Errorf("host binding %s: %w", k, err)
		}
		out, at = append(out, b), append(at, k)
	}
	return out, at, nil
}

// forgetTokenHosts returns the mutations that forget the keys of the hosts
// that last registered with token id: revoking a token is how a manager
// lets a reinstalled host (a new key) take its name again.
func (s *hosts) forgetTokenHosts(ctx context.Context, fleetID, id string) ([]store.Mutation, error) {
	bs, keys, err := s.hostBindings(ctx, fleetID)
	if err != nil {
		return nil, err
	}
	var muts []store.Mutation
	for i, b := range bs {
		if b.TokenID == id {
			muts = append(muts, store.KVDelete(keys[i]))
		}
	}
	return muts, nil
}
