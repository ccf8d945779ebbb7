package daemon

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// caller is the authenticated user of a request.
type caller struct {
	name  string
	admin bool // global admin
}

type callerKey struct{}

// roleRank orders project roles; a higher rank may do what a lower may.
func roleRank(role string) int {
	switch role {
	case api.RoleAdmin:
		return 3
	case api.RoleManager:
		return 2
	case api.RoleUser:
		return 1
	}
	return 0
}

// authenticate resolves the bearer token to a user, or answers 401.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		token, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || token == "" {
			s.writeError(w, r, apiErr(http.StatusUnauthorized, api.CodeUnauthorized, "", "send Authorization: Bearer <token> (gpud login, or GPUD_TOKEN)"))
			return
		}
		u, err := s.store.UserByToken(token)
		if err != nil {
			s.writeError(w, r, apiErr(http.StatusUnauthorized, api.CodeUnauthorized, "", "the token is not valid (revoked or mistyped)"))
			return
		}
		c := caller{name: u.Name, admin: u.Role == api.RoleAdmin}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

func callerOf(r *http.Request) caller {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c
}

// projectRole returns the caller's role in project, "admin" for global
// admins. A missing project and a non-member both answer 404, so project
// names do not leak to outsiders.
func (s *Server) projectRole(c caller, project string) (string, error) {
	if _, err := s.store.Projects().Get(project); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return "", apiErr(http.StatusNotFound, api.CodeProjectNotFound, "", "project %q not found (or you are not a member)", project)
		}
		return "", err
	}
	if c.admin {
		return api.RoleAdmin, nil
	}
	m, err := s.store.Members().Get(store.MemberID(project, c.name))
	if err != nil {
		return "", apiErr(http.StatusNotFound, api.CodeProjectNotFound, "", "project %q not found (or you are not a member)", project)
	}
	return m.Role, nil
}

// authorize checks that the caller holds at least role in the request's
// {project}; it returns the project name.
func (s *Server) authorize(r *http.Request, role string) (string, caller, error) {
	project, c, _, err := s.authorizeRole(r, role)
	return project, c, err
}

// authorizeRole is authorize that also returns the role the caller holds.
func (s *Server) authorizeRole(r *http.Request, role string) (project string, c caller, have string, err error) {
	c = callerOf(r)
	project = r.PathValue("project")
	have, err = s.projectRole(c, project)
	if err != nil {
		return "", c, "", err
	}
	if roleRank(have) < roleRank(role) {
		return "", c, "", forbidden("this needs the %s role in project %q; you are %s", role, project, have)
	}
	return project, c, have, nil
}

// requireAdmin answers 403 unless the caller is a global admin.
func requireAdmin(r *http.Request) error {
	if !callerOf(r).admin {
		return forbidden("only a global admin may do this")
	}
	return nil
}
