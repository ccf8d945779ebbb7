package daemon

import (
	"net/http"

	"gpud.dev/gpud/api"
)

// routes maps every endpoint of api/server.go to its handler. Everything
// but /api/v1/healthz goes through authenticate.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	authed := func(pattern string, h handlerFunc) {
		mux.Handle(pattern, s.authenticate(s.route(h)))
	}
	mux.Handle("GET /api/v1/healthz", s.route(func(w http.ResponseWriter, _ *http.Request) error {
		writeJSON(w, http.StatusOK, api.Health{Status: "ok", Version: s.opts.Version})
		return nil
	}))
	authed("GET /api/v1/whoami", s.handleWhoami)
	authed("GET /api/v1/users", s.handleListUsers)
	authed("POST /api/v1/users", s.handleCreateUser)
	authed("GET /api/v1/users/{user}", s.handleGetUser)
	authed("DELETE /api/v1/users/{user}", s.handleDeleteUser)
	authed("POST /api/v1/users/{user}/token", s.handleRotateToken)
	authed("GET /api/v1/projects", s.handleListProjects)
	authed("POST /api/v1/projects", s.handleCreateProject)
	authed("GET /api/v1/projects/{project}", s.handleGetProject)
	authed("DELETE /api/v1/projects/{project}", s.handleDeleteProject)
	authed("GET /api/v1/projects/{project}/members", s.handleListMembers)
	authed("PUT /api/v1/projects/{project}/members/{user}", s.handleSetMember)
	authed("DELETE /api/v1/projects/{project}/members/{user}", s.handleDeleteMember)
	authed("POST /api/v1/projects/{project}/runs/plan", s.handlePlanRun)
	authed("POST /api/v1/projects/{project}/runs/apply", s.handleApplyRun)
	authed("GET /api/v1/projects/{project}/runs", s.handleListRuns)
	authed("GET /api/v1/projects/{project}/runs/{run}", s.handleGetRun)
	authed("POST /api/v1/projects/{project}/runs/{run}/stop", s.handleStopRun)
	authed("DELETE /api/v1/projects/{project}/runs/{run}", s.handleDeleteRun)
	authed("GET /api/v1/projects/{project}/runs/{run}/logs", s.handleLogs)
	authed("GET /api/v1/projects/{project}/runs/{run}/events", s.handleEvents)
	authed("GET /api/v1/projects/{project}/events", s.handleEvents)
	authed("POST /api/v1/projects/{project}/fleets/apply", s.handleApplyFleet)
	authed("GET /api/v1/projects/{project}/fleets", s.handleListFleets)
	authed("GET /api/v1/projects/{project}/fleets/{fleet}", s.handleGetFleet)
	authed("DELETE /api/v1/projects/{project}/fleets/{fleet}", s.handleDeleteFleet)
	authed("POST /api/v1/projects/{project}/fleets/{fleet}/tokens", s.handleIssueRegistrationToken)
	authed("DELETE /api/v1/projects/{project}/fleets/{fleet}/tokens/{id}", s.handleRevokeRegistrationToken)
	authed("GET /api/v1/projects/{project}/instances", s.handleListInstances)
	authed("GET /api/v1/projects/{project}/offers", s.handleOffers)
	authed("POST /api/v1/projects/{project}/queues/apply", s.handleApplyQueue)
	authed("GET /api/v1/projects/{project}/queues", s.handleListQueues)
	authed("DELETE /api/v1/projects/{project}/queues/{queue}", s.handleDeleteQueue)
	authed("GET /api/v1/projects/{project}/secrets", s.handleListSecrets)
	authed("GET /api/v1/projects/{project}/secrets/{name}", s.handleGetSecret)
	authed("PUT /api/v1/projects/{project}/secrets/{name}", s.handleSetSecret)
	authed("DELETE /api/v1/projects/{project}/secrets/{name}", s.handleDeleteSecret)
	authed("POST /api/v1/agents/heartbeat", s.handleHeartbeat)
	authed("/proxy/services/{project}/{run}/{path...}", s.handleServiceProxy)
	mux.Handle("/", s.route(func(w http.ResponseWriter, r *http.Request) error {
		return apiErr(http.StatusNotFound, api.CodeNotFound, "", "no endpoint %s %s (see docs/server.md)", r.Method, r.URL.Path)
	}))
	return mux
}
