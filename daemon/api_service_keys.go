package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// The per-service key endpoints, /api/v1/projects/{project}/runs/{run}/keys.
//
// Who may do what: any member lists a service's keys (names and dates,
// never a key: a member may call the service with its own token anyway);
// creating and revoking take the run's submitter or a manager of the
// project. A key is a lasting bearer credential handed to clients outside
// the project, so a member must not mint one for a colleague's service,
// nor revoke one and break the clients its owner gave it to; the owner
// chose to deploy the service, and managers already govern who reaches
// the project. A key never grants more than its maker could: it stops
// working when its maker leaves the project (serviceKeyValid).

// serviceKeysMu serializes creating and revoking keys: the name check
// and the write are one step, so two creations of one name cannot leave
// a key that no name lists (and none could revoke).
var serviceKeysMu sync.Mutex

// keyRun is the run a keys path names: its name, its id for events
// ("" when no run of that name exists any more) and its submitter.
type keyRun struct {
	name, id, owner string
	service         bool
}

func (s *runsAPI) keyRunOf(project, name string) (keyRun, error) {
	run, err := s.findRun(project, name)
	if err != nil {
		if err := checkName("run", name); err != nil {
			return keyRun{}, err
		}
		return keyRun{name: name}, nil
	}
	rs, err := s.runSpec(run)
	if err != nil {
		return keyRun{}, err
	}
	return keyRun{name: run.Name, id: run.ID, owner: run.User, service: rs.Type == api.KindService}, nil
}

// mayManageKeys refuses a caller who is neither the run's submitter nor a
// manager of the project.
func mayManageKeys(c caller, have string, kr keyRun, verb string) error {
	if roleRank(have) >= roleRank(api.RoleManager) || (kr.owner != "" && kr.owner == c.name) {
		return nil
	}
	return forbidden("only the run's submitter or a manager of the project may %s keys of service %q", verb, kr.name)
}

// handleCreateServiceKey makes a key for a service and answers it, once.
func (s *runsAPI) handleCreateServiceKey(w http.ResponseWriter, r *http.Request) error {
	project, c, have, err := s.authorizeRole(r, api.RoleUser)
	if err != nil {
		return err
	}
	run, err := s.findRun(project, r.PathValue("run"))
	if err != nil {
		return err
	}
	kr, err := s.keyRunOf(project, run.Name)
	if err != nil {
		return err
	}
	if err := mayManageKeys(c, have, kr, "create"); err != nil {
		return err
	}
	if !kr.service {
		return apiErr(http.StatusConflict, api.CodeConflict, "", "run %q is not a service: keys open services only", kr.name)
	}
	var req api.CreateServiceKeyRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, &req); err != nil {
			return err
		}
	}
	key, hash, err := newServiceKey()
	if err != nil {
		return err
	}
	if req.Name == "" {
		req.Name = defaultKeyName(hash)
	}
	if err := checkName("name", req.Name); err != nil {
		return err
	}
	p, err := s.store.Projects().Get(project)
	if err != nil {
		return err
	}
	u, err := s.store.Users().Get(c.name)
	if err != nil {
		return err
	}
	e := serviceKeyEntry{Hash: hash, Project: project, ProjectCreated: p.CreatedAt.UnixNano(), Run: kr.name, Name: req.Name,
		CreatedBy: c.name, CreatorCreated: u.CreatedAt.UnixNano(), CreatedAt: s.now().UTC()}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	serviceKeysMu.Lock()
	defer serviceKeysMu.Unlock()
	existing, err := s.serviceKeysOf(r.Context(), project, kr.name)
	if err != nil {
		return err
	}
	for _, x := range existing {
		if x.Name == req.Name {
			return apiErr(http.StatusConflict, api.CodeConflict, "name", "service %q already has a key named %q: revoke it first, or pick another name", kr.name, req.Name)
		}
	}
	if len(existing) >= maxServiceKeys {
		return apiErr(http.StatusConflict, api.CodeConflict, "", "service %q has %d keys, the most it may hold: revoke some first", kr.name, len(existing))
	}
	if _, err := s.store.Apply(r.Context(), store.KVPut(serviceKeyHashKey(hash), b), store.KVPut(serviceKeyNameKey(project, kr.name, req.Name), []byte(hash)),
		s.event(project, store.KindRun, kr.id, "service_key_created", fmt.Sprintf("service key %s created by %s", req.Name, c.name))); err != nil {
		return err
	}
	out := s.serviceKeyOut(r.Context(), e)
	out.Key = key
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// handleListServiceKeys lists a service's keys without the keys.
func (s *runsAPI) handleListServiceKeys(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	kr, err := s.keyRunOf(project, r.PathValue("run"))
	if err != nil {
		return err
	}
	es, err := s.serviceKeysOf(r.Context(), project, kr.name)
	if err != nil {
		return err
	}
	if kr.id == "" && len(es) == 0 {
		return notFound("run", kr.name) // a typo, not a service without keys
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
	out := []api.ServiceKey{}
	for _, e := range es {
		out = append(out, s.serviceKeyOut(r.Context(), e))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// handleRevokeServiceKey removes a key: the next request with it gets 401
// (the gateway looks keys up on every request; nothing caches them).
func (s *runsAPI) handleRevokeServiceKey(w http.ResponseWriter, r *http.Request) error {
	project, c, have, err := s.authorizeRole(r, api.RoleUser)
	if err != nil {
		return err
	}
	kr, err := s.keyRunOf(project, r.PathValue("run"))
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if checkName("name", name) != nil {
		return notFound("service key", name)
	}
	serviceKeysMu.Lock()
	defer serviceKeysMu.Unlock()
	hash, err := s.store.KV().Load(r.Context(), serviceKeyNameKey(project, kr.name, name))
	if err != nil {
		return notFound("service key", name)
	}
	if err := mayManageKeys(c, have, kr, "revoke"); err != nil {
		return err
	}
	muts := []store.Mutation{store.KVDelete(serviceKeyHashKey(string(hash))), store.KVDelete(serviceKeyNameKey(project, kr.name, name)),
		store.KVDelete(serviceKeyUsedKey(string(hash)))}
	if kr.id != "" {
		muts = append(muts, s.event(project, store.KindRun, kr.id, "service_key_revoked", fmt.Sprintf("service key %s revoked by %s", name, c.name)))
	}
	if _, err := s.store.Apply(r.Context(), muts...); err != nil {
		return err
	}
	keyUses.Delete(string(hash))
	w.WriteHeader(http.StatusNoContent)
	return nil
}
