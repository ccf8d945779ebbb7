package api

// Access says who may call a route. The server registers its handlers from
// Routes and its authorization test is generated from the same table, so a
// route cannot be added without saying who may call it, and the rule the
// table states is the rule the server is tested to enforce.
type Access string

// The kinds of access a route requires. Project roles are checked in the
// project named by the path's {project}: a caller who is not a member gets
// 404 project_not_found (project names do not leak); a member below the
// role gets 403. A global admin holds every project role.
const (
	// AccessPublic needs no token.
	AccessPublic Access = "public"
	// AccessAuthenticated needs any valid token.
	AccessAuthenticated Access = "authenticated"
	// AccessGlobalAdmin needs a global admin's token; others get 403.
	AccessGlobalAdmin Access = "global-admin"
	// AccessSelf is a global admin, or the user named by {user}; anyone
	// else gets 404 not_found (user names do not leak).
	AccessSelf Access = "self"
	// AccessProjectUser is any member of {project}.
	AccessProjectUser Access = "project-user"
	// AccessProjectManager is a manager or admin of {project}.
	AccessProjectManager Access = "project-manager"
	// AccessProjectAdmin is an admin of {project}.
	AccessProjectAdmin Access = "project-admin"
	// AccessService is AccessProjectUser, except that a request without a
	// token reaches a running service whose configuration says auth: false.
	AccessService Access = "service"
)

// ProjectRole returns the project role an access level requires, or "" for
// levels that are not project roles.
func (a Access) ProjectRole() string {
	switch a {
	case AccessProjectUser, AccessService:
		return RoleUser
	case AccessProjectManager:
		return RoleManager
	case AccessProjectAdmin:
		return RoleAdmin
	}
	return ""
}

// Route is one endpoint of the server API.
type Route struct {
	// Method is the HTTP method; "" matches every method.
	Method string
	// Path is a net/http ServeMux pattern path.
	Path   string
	Access Access
	// Request and Response name the wire types (documentation).
	Request, Response string
}

// Pattern is the route's net/http ServeMux pattern.
func (r Route) Pattern() string {
	if r.Method == "" {
		return r.Path
	}
	return r.Method + " " + r.Path
}

const projectPrefix = "/api/v1/projects/{project}"

// Routes is every endpoint of the server API, version 1 (see the package
// comment in server.go for the conventions they share).
var Routes = []Route{
	{"GET", "/api/v1/healthz", AccessPublic, "-", "Health"},
	{"GET", "/api/v1/whoami", AccessAuthenticated, "-", "User"},
	{"GET", "/api/v1/users", AccessGlobalAdmin, "-", "[]User"},
	{"POST", "/api/v1/users", AccessGlobalAdmin, "CreateUserRequest", "UserToken (201)"},
	{"GET", "/api/v1/users/{user}", AccessSelf, "-", "User"},
	{"DELETE", "/api/v1/users/{user}", AccessGlobalAdmin, "-", "204"},
	{"POST", "/api/v1/users/{user}/token", AccessSelf, "-", "UserToken (rotates: the old token stops working)"},
	{"PUT", "/api/v1/users/{user}/ssh-key", AccessSelf, "SSHKey", "SSHKey (replaces the user's key for SSH into runs)"},
	{"GET", "/api/v1/projects", AccessAuthenticated, "-", "[]Project (only the caller's projects; all for admins)"},
	{"POST", "/api/v1/projects", AccessGlobalAdmin, "CreateProjectRequest", "Project (201); the caller becomes its admin"},
	{"GET", projectPrefix, AccessProjectUser, "-", "Project"},
	{"DELETE", projectPrefix, AccessGlobalAdmin, "-", "204: its finished runs, members, queues, secrets, gateways go with it (409 naming its unfinished runs, fleets, volumes, backends)"},
	{"GET", projectPrefix + "/members", AccessProjectUser, "-", "[]Member"},
	{"PUT", projectPrefix + "/members/{user}", AccessProjectManager, "SetMemberRequest", "Member (never above the caller's own role)"},
	{"DELETE", projectPrefix + "/members/{user}", AccessProjectManager, "-", "204 (never a member above the caller's own role)"},
	{"PUT", projectPrefix + "/uploads/{sha256}", AccessProjectUser, "tar.gz of repos and files (Content-Length required)", "Upload (201 stored, 200 already stored; 413 over the server's limit, before any byte is read)"},
	{"POST", projectPrefix + "/runs/plan", AccessProjectUser, "ApplyRunRequest", "RunPlan"},
	{"POST", projectPrefix + "/runs/apply", AccessProjectUser, "ApplyRunRequest", "Run (201 new, 200 replaced)"},
	{"GET", projectPrefix + "/runs", AccessProjectUser, "?all=true", "[]Run (active runs; all=true adds finished)"},
	{"GET", projectPrefix + "/runs/{run}", AccessProjectUser, "-", "Run"},
	{"POST", projectPrefix + "/runs/{run}/stop", AccessProjectUser, "StopRunRequest", "Run"},
	{"DELETE", projectPrefix + "/runs/{run}", AccessProjectUser, "-", "204: the run, its jobs, logs and, with its last record, its service keys (409 unless finished; a service with keys: its submitter or a manager, else 403)"},
	{"GET", projectPrefix + "/runs/{run}/logs", AccessProjectUser, "?follow=true&job=ID&offset=N", "NDJSON of LogEntry"},
	{"GET", projectPrefix + "/runs/{run}/events", AccessProjectUser, "?after=ID", "[]Event"},
	{"GET", projectPrefix + "/runs/{run}/ssh", AccessProjectUser, "Upgrade: gpud-ssh/1; ?job=ID", "101, then SSH to the job (api/ssh.go)"},
	{"POST", projectPrefix + "/runs/{run}/keys", AccessProjectUser, "CreateServiceKeyRequest", "ServiceKey (201; the key shown once; the run's submitter or a manager, else 403)"},
	{"GET", projectPrefix + "/runs/{run}/keys", AccessProjectUser, "-", "[]ServiceKey (names and dates, never a key)"},
	{"DELETE", projectPrefix + "/runs/{run}/keys/{name}", AccessProjectUser, "-", "204 (revoked at once; the run's submitter or a manager, else 403)"},
	{"GET", projectPrefix + "/events", AccessProjectUser, "?after=ID&limit=N", "[]Event"},
	{"POST", projectPrefix + "/fleets/apply", AccessProjectManager, "ApplyRequest", "Fleet"},
	{"GET", projectPrefix + "/fleets", AccessProjectUser, "-", "[]Fleet (the project's and shared ones)"},
	{"GET", projectPrefix + "/fleets/{fleet}", AccessProjectUser, "-", "Fleet"},
	{"DELETE", projectPrefix + "/fleets/{fleet}", AccessProjectManager, "-", "204 (403 for shared fleets)"},
	{"POST", projectPrefix + "/fleets/{fleet}/tokens", AccessProjectManager, "-", "RegistrationToken (201; token shown once; shared fleets: global admins only)"},
	{"DELETE", projectPrefix + "/fleets/{fleet}/tokens/{id}", AccessProjectManager, "-", "204 (revoked; its tunnels dropped; shared fleets: global admins only)"},
	{"GET", projectPrefix + "/instances", AccessProjectUser, "-", "[]Instance"},
	{"GET", projectPrefix + "/offers", AccessProjectUser, "?gpu=H100:2&cpu=4..&memory=16GB..", "[]Offer"},
	{"POST", projectPrefix + "/backends", AccessProjectAdmin, "AddBackendRequest", "Backend (checked through its plugin before it is stored; credentials sealed, never returned)"},
	{"GET", projectPrefix + "/backends", AccessProjectUser, "-", "[]Backend (no configuration)"},
	{"DELETE", projectPrefix + "/backends/{backend}", AccessProjectAdmin, "-", "204 (409 while it runs gangs)"},
	{"POST", projectPrefix + "/queues/apply", AccessProjectManager, "ApplyRequest", "Queue"},
	{"GET", projectPrefix + "/queues", AccessProjectUser, "-", "[]Queue"},
	{"DELETE", projectPrefix + "/queues/{queue}", AccessProjectManager, "-", "204 (409 while runs use it)"},
	{"POST", projectPrefix + "/volumes/apply", AccessProjectUser, "ApplyRequest", "Volume (a volume on a gpud host backend: local, ssh, registered)"},
	{"GET", projectPrefix + "/volumes", AccessProjectUser, "-", "[]Volume"},
	{"DELETE", projectPrefix + "/volumes/{volume}", AccessProjectUser, "-", "204 (its creator or a manager; 409 naming the active runs that use it)"},
	{"POST", projectPrefix + "/gateways/apply", AccessProjectManager, "ApplyRequest", "Gateway (409 for a domain another gateway or project holds)"},
	{"GET", projectPrefix + "/gateways", AccessProjectUser, "-", "[]Gateway"},
	{"DELETE", projectPrefix + "/gateways/{gateway}", AccessProjectManager, "-", "204"},
	{"GET", "/api/v1/gateway/hosts/{host}", AccessAuthenticated, "-", "GatewayHost: the service a hostname reaches, for a standalone gateway (404 unless the caller is a member of its project)"},
	{"GET", "/api/v1/gateway/ca.pem", AccessPublic, "-", "PEM of the gateway's internal CA, for clients to trust (404 unless gpud serve --tls internal)"},
	{"GET", projectPrefix + "/secrets", AccessProjectUser, "-", "[]Secret (names only)"},
	{"GET", projectPrefix + "/secrets/{name}", AccessProjectManager, "-", "Secret (with value)"},
	{"PUT", projectPrefix + "/secrets/{name}", AccessProjectManager, "SetSecretRequest", "Secret (without value; the value must not be empty)"},
	{"DELETE", projectPrefix + "/secrets/{name}", AccessProjectManager, "-", "204"},
	{"POST", "/api/v1/agents/heartbeat", AccessGlobalAdmin, "Heartbeat", "HeartbeatResponse"},
	{"", "/proxy/services/{project}/{run}/{path...}", AccessService, "any", "the service's answer"},
	{"GET", "/metrics", AccessGlobalAdmin, "-", "Prometheus text: the gateway's requests by service and status, latency, in-flight (docs/gateway.md)"},
	{"", "/proxy/models/{project}/{path...}", AccessProjectUser, "OpenAI request naming its model (POST v1/chat/completions, v1/completions, v1/embeddings)", "the model's service's answer, streamed; GET v1/models: OpenAI's model list"},
}
