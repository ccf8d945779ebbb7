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
		"GET /api/v1/whoami":                                           s.accountsAPI.handleWhoami,
		"GET /api/v1/users":                                            s.accountsAPI.handleListUsers,
		"POST /api/v1/users":                                           s.accountsAPI.handleCreateUser,
		"GET /api/v1/users/{user}":                                     s.accountsAPI.handleGetUser,
		"DELETE /api/v1/users/{user}":                                  s.accountsAPI.handleDeleteUser,
		"POST /api/v1/users/{user}/token":                              s.accountsAPI.handleRotateToken,
		"PUT /api/v1/users/{user}/ssh-key":                             s.accountsAPI.handleSetSSHKey,
		"GET /api/v1/projects":                                         s.accountsAPI.handleListProjects,
		"POST /api/v1/projects":                                        s.accountsAPI.handleCreateProject,
		"GET /api/v1/projects/{project}":                               s.accountsAPI.handleGetProject,
		"DELETE /api/v1/projects/{project}":                            s.accountsAPI.handleDeleteProject,
		"GET /api/v1/projects/{project}/members":                       s.accountsAPI.handleListMembers,
		"PUT /api/v1/projects/{project}/members/{user}":                s.accountsAPI.handleSetMember,
		"DELETE /api/v1/projects/{project}/members/{user}":             s.accountsAPI.handleDeleteMember,
		"PUT /api/v1/projects/{project}/uploads/{sha256}":              s.runsAPI.handleUpload,
		"POST /api/v1/projects/{project}/runs/plan":                    s.runsAPI.handlePlanRun,
		"POST /api/v1/projects/{project}/runs/apply":                   s.runsAPI.handleApplyRun,
		"GET /api/v1/projects/{project}/runs":                          s.runsAPI.handleListRuns,
		"GET /api/v1/projects/{project}/runs/{run}":                    s.runsAPI.handleGetRun,
		"POST /api/v1/projects/{project}/runs/{run}/stop":              s.runsAPI.handleStopRun,
		"DELETE /api/v1/projects/{project}/runs/{run}":                 s.runsAPI.handleDeleteRun,
		"GET /api/v1/projects/{project}/runs/{run}/logs":               s.runsAPI.handleLogs,
		"GET /api/v1/projects/{project}/runs/{run}/events":             s.runsAPI.handleEvents,
		"GET /api/v1/projects/{project}/runs/{run}/ssh":                s.runsAPI.handleRunSSH,
		"POST /api/v1/projects/{project}/runs/{run}/keys":              s.runsAPI.handleCreateServiceKey,
		"GET /api/v1/projects/{project}/runs/{run}/keys":               s.runsAPI.handleListServiceKeys,
		"DELETE /api/v1/projects/{project}/runs/{run}/keys/{name}":     s.runsAPI.handleRevokeServiceKey,
		"GET /api/v1/projects/{project}/events":                        s.runsAPI.handleEvents,
		"POST /api/v1/projects/{project}/fleets/apply":                 s.fleetsAPI.handleApplyFleet,
		"GET /api/v1/projects/{project}/fleets":                        s.fleetsAPI.handleListFleets,
		"GET /api/v1/projects/{project}/fleets/{fleet}":                s.fleetsAPI.handleGetFleet,
		"DELETE /api/v1/projects/{project}/fleets/{fleet}":             s.fleetsAPI.handleDeleteFleet,
		"POST /api/v1/projects/{project}/fleets/{fleet}/tokens":        s.fleetsAPI.handleIssueRegistrationToken,
		"DELETE /api/v1/projects/{project}/fleets/{fleet}/tokens/{id}": s.fleetsAPI.handleRevokeRegistrationToken,
		"GET /api/v1/projects/{project}/instances":                     s.fleetsAPI.handleListInstances,
		"GET /api/v1/projects/{project}/offers":                        s.fleetsAPI.handleOffers,
		"POST /api/v1/projects/{project}/backends":                     s.handleAddBackend,
		"GET /api/v1/projects/{project}/backends":                      s.handleListBackends,
		"DELETE /api/v1/projects/{project}/backends/{backend}":         s.handleDeleteBackend,
		"POST /api/v1/projects/{project}/queues/apply":                 s.fleetsAPI.handleApplyQueue,
		"GET /api/v1/projects/{project}/queues":                        s.fleetsAPI.handleListQueues,
		"DELETE /api/v1/projects/{project}/queues/{queue}":             s.fleetsAPI.handleDeleteQueue,
		"POST /api/v1/projects/{project}/volumes/apply":                s.fleetsAPI.handleApplyVolume,
		"GET /api/v1/projects/{project}/volumes":                       s.fleetsAPI.handleListVolumes,
		"DELETE /api/v1/projects/{project}/volumes/{volume}":           s.fleetsAPI.handleDeleteVolume,
		"POST /api/v1/projects/{project}/gateways/apply":               s.fleetsAPI.handleApplyGateway,
		"GET /api/v1/projects/{project}/gateways":                      s.fleetsAPI.handleListGateways,
		"DELETE /api/v1/projects/{project}/gateways/{gateway}":         s.fleetsAPI.handleDeleteGateway,
		"GET /api/v1/gateway/hosts/{host}":                             s.handleGatewayHost,
		"GET /api/v1/gateway/ca.pem":                                   s.handleGatewayCA,
		"GET /api/v1/projects/{project}/secrets":                       s.accountsAPI.handleListSecrets,
		"GET /api/v1/projects/{project}/secrets/{name}":                s.accountsAPI.handleGetSecret,
		"PUT /api/v1/projects/{project}/secrets/{name}":                s.accountsAPI.handleSetSecret,
		"DELETE /api/v1/projects/{project}/secrets/{name}":             s.accountsAPI.handleDeleteSecret,
		"POST /api/v1/agents/heartbeat":                                s.hosts.handleHeartbeat,
		"GET /metrics":                                                 s.handleMetrics,
		"/proxy/services/{project}/{run}/{path...}":                    s.runsAPI.handleServiceProxy,
		"/proxy/models/{project}/{path...}":                            s.runsAPI.handleModels,
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
		if rt.Access == api.AccessService {
			mux.Handle(rt.Pattern(), s.runsAPI.openService(s.authenticate(s.route(s.gate(rt.Access, h)))))
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
