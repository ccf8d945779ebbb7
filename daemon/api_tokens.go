package daemon

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// tokenFleet is authorizedFleet for the token handlers: a project's
// fleet takes a manager of the project; a shared fleet, whose hosts serve
// every project, takes a global admin.
func (s *fleetsAPI) tokenFleet(r *http.Request, verb string) (string, caller, store.Record, error) {
	project, c, f, err := s.authorizedFleet(r, api.RoleManager)
	if err == nil && f.Project == "" && !c.admin {
		err = forbidden("fleet %q is shared by every project: only a global admin may %s its registration tokens", f.Name, verb)
	}
	return project, c, f, err
}

// handleIssueRegistrationToken issues a token for a fleet (manager; a
// global admin for a shared fleet).
func (s *fleetsAPI) handleIssueRegistrationToken(w http.ResponseWriter, r *http.Request) error {
	project, c, f, err := s.tokenFleet(r, "issue")
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
	// The token belongs to the fleet's project ("" for a shared fleet),
	// not to the path's: deleting the project a global admin happened to
	// name must not take a shared fleet's token with it.
	rec := regTokenRecord{Fleet: f.ID, Project: f.Project, ID: hash[:12]}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := s.store.Apply(r.Context(), store.KVPut(regTokenKey(hash), b), store.KVPut(regIDKey(rec.ID), []byte(hash)),
		s.event(project, store.KindFleet, f.ID, "token_issued", "registration token "+rec.ID+" issued by "+c.name)); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.RegistrationToken{ID: rec.ID, Fleet: f.Name, Token: token})
	return nil
}

// handleRevokeRegistrationToken revokes a token, drops its tunnels and
// forgets the keys of the hosts that registered with it.
func (s *fleetsAPI) handleRevokeRegistrationToken(w http.ResponseWriter, r *http.Request) error {
	project, c, f, err := s.tokenFleet(r, "revoke")
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
	if b, err = json.Marshal(rec); err != nil {
		return err
	}
	forget, err := s.hosts.forgetTokenHosts(r.Context(), f.ID, id)
	if err != nil {
		return err
	}
	muts := append([]store.Mutation{store.KVPut(regTokenKey(string(hash)), b),
		s.event(project, store.KindFleet, f.ID, "token_revoked", fmt.Sprintf("registration token %s revoked by %s; %d hosts' keys forgotten", id, c.name, len(forget)))}, forget...)
	if _, err := s.store.Apply(r.Context(), muts...); err != nil {
		return err
	}
	if s.hosts.registration != nil {
		s.hosts.registration.DropToken(id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
