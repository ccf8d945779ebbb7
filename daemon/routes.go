package daemon

import (
	"fmt"
	"net/http"
	"sort"

	"gpud.dev/gpud/api"
)

// routes serves every endpoint of api.Routes with its handler, behind the
// gate that the route's Access names: the table that documents who may
// call a route is the table the server enforces (handlers still resolve
// and check their own records), and TestAuthorizationMatrix is generated
// from it. A route without a handler, or a handler without a route, is an
// error, so neither can be added alone.
func (s *Server) routes() (http.Handler, error) {
	handlers := map[string]handlerFunc{
		"GET /api/v1/healthz":                                          s.handleHealth,
		"GET /api/v1/whoami":                                           s.handleWhoami,
		"GET /api/v1/users":                                            s.handleListUsers,
		"POST /api/v1/users":                                           s.handleCreateUser,
		"GET /api/v1/users/{user}":                                     s.handleGetUser,
		"DELETE /api/v1/users/{user}":                                  s.handleDeleteUser,
		"POST /api/v1/users/{user}/token":                              s.handleRotateToken,
		"GET /api/v1/projects":                                         s.handleListProjects,
		"POST /api/v1/projects":                                        s.handleCreateProject,
		"GET /api/v1/projects/{project}":                               s.handleGetProject,
		"DELETE /api/v1/projects/{project}":                            s.handleDeleteProject,
		"GET /api/v1/projects/{project}/members":                       s.handleListMembers,
		"PUT /api/v1/projects/{project}/members/{user}":                s.handleSetMember,
		"DELETE /api/v1/projects/{project}/members/{user}":             s.handleDeleteMember,
		"POST /api/v1/projects/{project}/runs/plan":                    s.handlePlanRun,
		"POST /api/v1/projects/{project}/runs/apply":                   s.handleApplyRun,
		"GET /api/v1/projects/{project}/runs":                          s.handleListRuns,
		"GET /api/v1/projects/{project}/runs/{run}":                    s.handleGetRun,
		"POST /api/v1/projects/{project}/runs/{run}/stop":              s.handleStopRun,
		"DELETE /api/v1/projects/{project}/runs/{run}":                 s.handleDeleteRun,
		"GET /api/v1/projects/{project}/runs/{run}/logs":               s.handleLogs,
		"GET /api/v1/projects/{project}/runs/{run}/events":             s.handleEvents,
		"GET /api/v1/projects/{project}/events":                        s.handleEvents,
		"POST /api/v1/projects/{project}/fleets/apply":                 s.handleApplyFleet,
		"GET /api/v1/projects/{project}/fleets":                        s.handleListFleets,
		"GET /api/v1/projects/{project}/fleets/{fleet}":                s.handleGetFleet,
		"DELETE /api/v1/projects/{project}/fleets/{fleet}":             s.handleDeleteFleet,
		"POST /api/v1/projects/{project}/fleets/{fleet}/tokens":        s.handleIssueRegistrationToken,
		"DELETE /api/v1/projects/{project}/fleets/{fleet}/tokens/{id}": s.handleRevokeRegistrationToken,
		"GET /api/v1/projects/{project}/instances":                     s.handleListInstances,
		"GET /api/v1/projects/{project}/offers":                        s.handleOffers,
		"POST /api/v1/projects/{project}/queues/apply":                 s.handleApplyQueue,
		"GET /api/v1/projects/{project}/queues":                        s.handleListQueues,
		"DELETE /api/v1/projects/{project}/queues/{queue}":             s.handleDeleteQueue,
		"GET /api/v1/projects/{project}/secrets":                       s.handleListSecrets,
		"GET /api/v1/projects/{project}/secrets/{name}":                s.handleGetSecret,
		"PUT /api/v1/projects/{project}/secrets/{name}":                s.handleSetSecret,
		"DELETE /api/v1/projects/{project}/secrets/{name}":             s.handleDeleteSecret,
		"POST /api/v1/agents/heartbeat":                                s.hosts.handleHeartbeat,
		"/proxy/services/{project}/{run}/{path...}":                    s.handleServiceProxy,
	}
	mux := http.NewServeMux()
	for _, rt := range api.Routes {
		h, ok := handlers[rt.Pattern()]
		if !ok {
			return nil, fmt.Errorf("api route %s has no handler", rt.Pattern())
		}
		delete(handlers, rt.Pattern())
		if rt.Access == api.AccessPublic {
			mux.Handle(rt.Pattern(), s.route(h))
			continue
		}
		mux.Handle(rt.Pattern(), s.authenticate(s.route(s.gate(rt.Access, h))))
	}
	if len(handlers) > 0 {
		var extra []string
		for p := range handlers {
			extra = append(extra, p)
		}
		sort.Strings(extra)
		return nil, fmt.Errorf("handlers without an api.Routes entry: %v", extra)
	}
	mux.Handle("/", s.route(func(w http.ResponseWriter, r *http.Request) error {
		return apiErr(http.StatusNotFound, api.CodeNotFound, "", "no endpoint %s %s (see docs/server.md)", r.Method, r.URL.Path)
	}))
	return mux, nil
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, api.Health{Status: "ok", Version: s.opts.Version})
	return nil
}

// gate refuses a caller who lacks access before h runs.
func (s *Server) gate(access api.Access, h handlerFunc) handlerFunc {
	var check func(r *http.Request) error
	switch access {
	case api.AccessAuthenticated:
		return h // authenticate has run
	case api.AccessGlobalAdmin:
		check = requireAdmin
	case api.AccessSelf:
		check = func(r *http.Request) error {
			c, name := callerOf(r), r.PathValue("user")
			if !c.admin && c.name != name {
				return notFound("user", name)
			}
			return nil
		}
	default:
		role := access.ProjectRole()
		if role == "" {
			// An access level this server does not know: refuse everyone
			// rather than serve the route open.
			return func(http.ResponseWriter, *http.Request) error {
				return forbidden("the route's access %q is unknown to this server", access)
			}
		}
		check = func(r *http.Request) error {
			_, _, err := s.authorize(r, role)
			return err
		}
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := check(r); err != nil {
			return err
		}
		return h(w, r)
	}
}
