package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// accountsAPI serves the HTTP API of users, projects, their members and
// their secrets (api_users.go, api_secrets.go).
type accountsAPI struct{ *Server }

// namePattern is what user, project, run, queue, fleet and secret names
// may look like (they appear in URLs and agent job ids).
var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

func checkName(field, name string) error {
	if !namePattern.MatchString(name) {
		return badField(field, "%q: use 1-63 lowercase letters, digits, '-' or '_', starting with a letter or digit", name)
	}
	return nil
}

func userOut(r store.Record) api.User {
	return api.User{Name: r.Name, Role: r.Role, CreatedAt: r.CreatedAt}
}

func (s *accountsAPI) handleWhoami(w http.ResponseWriter, r *http.Request) error {
	u, err := s.store.Users().Get(callerOf(r).name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, userOut(u))
	return nil
}

func (s *accountsAPI) handleListUsers(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdmin(r); err != nil {
		return err
	}
	out := []api.User{}
	for _, u := range s.store.Users().List() {
		out = append(out, userOut(u))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *accountsAPI) handleCreateUser(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdmin(r); err != nil {
		return err
	}
	var req api.CreateUserRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if err := checkName("name", req.Name); err != nil {
		return err
	}
	if req.Role == "" {
		req.Role = api.RoleUser
	}
	if req.Role != api.RoleAdmin && req.Role != api.RoleUser {
		return badField("global_role", "%q: use admin or user", req.Role)
	}
	token, err := store.NewToken()
	if err != nil {
		return err
	}
	rec := store.Record{Kind: store.KindUser, ID: req.Name, Name: req.Name, Role: req.Role, TokenHash: store.HashToken(token)}
	_, err = s.store.Apply(r.Context(), store.Create(rec))
	if errors.Is(err, store.ErrExists) {
		return conflict("user %q exists", req.Name)
	} else if err != nil {
		return err
	}
	if rec, err = s.store.Users().Get(req.Name); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.UserToken{User: userOut(rec), Token: token})
	return nil
}

// selfOrAdmin answers the user named in the path if it is the caller or
// the caller is an admin; others get 404 so user names do not leak.
func (s *accountsAPI) selfOrAdmin(r *http.Request) (store.Record, error) {
	c, name := callerOf(r), r.PathValue("user")
	if !c.admin && c.name != name {
		return store.Record{}, notFound("user", name)
	}
	u, err := s.store.Users().Get(name)
	if err != nil {
		return store.Record{}, notFound("user", name)
	}
	return u, nil
}

func (s *accountsAPI) handleGetUser(w http.ResponseWriter, r *http.Request) error {
	u, err := s.selfOrAdmin(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, userOut(u))
	return nil
}

func (s *accountsAPI) handleDeleteUser(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdmin(r); err != nil {
		return err
	}
	name := r.PathValue("user")
	if name == callerOf(r).name {
		return conflict("you cannot delete yourself")
	}
	if _, err := s.store.Users().Get(name); err != nil {
		return notFound("user", name)
	}
	muts := []store.Mutation{store.Delete(store.KindUser, name), store.KVDelete(sshKeyKV(name))}
	for _, m := range s.store.Members().List() {
		if m.User == name {
			muts = append(muts, store.Delete(store.KindMember, m.ID))
		}
	}
	if _, err := s.store.Apply(r.Context(), muts...); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *accountsAPI) handleRotateToken(w http.ResponseWriter, r *http.Request) error {
	u, err := s.selfOrAdmin(r)
	if err != nil {
		return err
	}
	token, err := store.NewToken()
	if err != nil {
		return err
	}
	u.TokenHash = store.HashToken(token)
	if _, err := s.store.Apply(r.Context(), store.Update(u)); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return conflict("the user changed meanwhile; try again")
		}
		return err
	}
	writeJSON(w, http.StatusOK, api.UserToken{User: userOut(u), Token: token})
	return nil
}

func (s *accountsAPI) handleListProjects(w http.ResponseWriter, r *http.Request) error {
	c := callerOf(r)
	out := []api.Project{}
	for _, p := range s.store.Projects().List() {
		role, err := s.projectRole(c, p.ID)
		if err != nil {
			continue
		}
		if m, err := s.store.Members().Get(store.MemberID(p.ID, c.name)); err == nil {
			role = m.Role
		} else {
			role = ""
		}
		out = append(out, api.Project{Name: p.Name, Owner: p.User, CreatedAt: p.CreatedAt, Role: role})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *accountsAPI) handleCreateProject(w http.ResponseWriter, r *http.Request) error {
	if err := requireAdmin(r); err != nil {
		return err
	}
	var req api.CreateProjectRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if err := checkName("name", req.Name); err != nil {
		return err
	}
	if _, err := s.store.Projects().Get(req.Name); err == nil {
		return conflict("project %q exists", req.Name)
	}
	c := callerOf(r)
	if _, err := s.store.Apply(r.Context(), s.projectMutations(req.Name, c.name)...); err != nil {
		return err
	}
	p, err := s.store.Projects().Get(req.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.Project{Name: p.Name, Owner: p.User, CreatedAt: p.CreatedAt, Role: api.RoleAdmin})
	return nil
}

func (s *accountsAPI) handleGetProject(w http.ResponseWriter, r *http.Request) error {
	project, c, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	p, err := s.store.Projects().Get(project)
	if err != nil {
		return err
	}
	role := ""
	if m, err := s.store.Members().Get(store.MemberID(project, c.name)); err == nil {
		role = m.Role
	}
	writeJSON(w, http.StatusOK, api.Project{Name: p.Name, Owner: p.User, CreatedAt: p.CreatedAt, Role: role})
	return nil
}

func (s *accountsAPI) handleListMembers(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	out := []api.Member{}
	for _, m := range s.store.Members().ByProject(project) {
		out = append(out, api.Member{Project: project, User: m.User, Role: m.Role})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].User < out[j].User })
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *accountsAPI) handleSetMember(w http.ResponseWriter, r *http.Request) error {
	project, c, have, err := s.authorizeRole(r, api.RoleManager)
	if err != nil {
		return err
	}
	var req api.SetMemberRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if roleRank(req.Role) == 0 {
		return badField("role", "%q: use admin, manager or user", req.Role)
	}
	if roleRank(req.Role) > roleRank(have) {
		return forbidden("you cannot grant %s: your role in project %q is %s", req.Role, project, have)
	}
	user := r.PathValue("user")
	if _, err := s.store.Users().Get(user); err != nil {
		return notFound("user", user)
	}
	if err := s.outranks(project, user, have, "change the role of"); err != nil {
		return err
	}
	rec := store.Record{Kind: store.KindMember, ID: store.MemberID(project, user), Project: project, User: user, Role: req.Role}
	if _, err := s.store.Apply(r.Context(), store.Put(rec),
		s.event(project, store.KindMember, rec.ID, "role_set", fmt.Sprintf("%s made %s by %s", user, req.Role, c.name))); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.Member{Project: project, User: user, Role: req.Role})
	return nil
}

func (s *accountsAPI) handleDeleteMember(w http.ResponseWriter, r *http.Request) error {
	project, c, have, err := s.authorizeRole(r, api.RoleManager)
	if err != nil {
		return err
	}
	user := r.PathValue("user")
	id := store.MemberID(project, user)
	if _, err := s.store.Members().Get(id); err != nil {
		return notFound("member", user)
	}
	if err := s.outranks(project, user, have, "remove"); err != nil {
		return err
	}
	if _, err := s.store.Apply(r.Context(), store.Delete(store.KindMember, id),
		s.event(project, store.KindMember, id, "removed", user+" removed by "+c.name)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// outranks refuses when user's current role in project is above have, the
// caller's: a member never lowers or removes a role above its own (a
// manager cannot demote or remove the project's admin).
func (s *accountsAPI) outranks(project, user, have, what string) error {
	m, err := s.store.Members().Get(store.MemberID(project, user))
	if err != nil {
		return nil // not a member yet: nothing above the caller to protect
	}
	if roleRank(m.Role) > roleRank(have) {
		return forbidden("you cannot %s %s: their role in project %q is %s, above yours (%s)", what, user, project, m.Role, have)
	}
	return nil
}
