package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Forwarder serves r for svc as the gateway serves a request that svc's
// host routed to it: the service's rate limits and auth, a ready replica
// (waiting for the first one of a service scaled to zero), then the
// forward of r's path and query as they are, flushing as bytes arrive
// (SSE is never buffered). It removes the server's credentials (the
// caller's gpud token) before the replica sees the request. The Gateway
// satisfies it; the model routes use it so that a request routed by model
// name is limited, balanced, retried, counted and scaled from zero like
// any other.
type Forwarder interface {
	Forward(w http.ResponseWriter, r *http.Request, svc *Service)
}

// MaxModelRequestBytes bounds the body of a model request, which the
// model routes read whole to find its "model" field (a chat request with
// inline images stays well under it).
const MaxModelRequestBytes = 32 << 20

// Models serves a project's OpenAI-compatible endpoint, dstack's
// /proxy/models/<project>/: GET models lists the models the project's
// services declare (model:), and POST chat/completions, completions and
// embeddings go to the service whose model the body's "model" field
// names. Paths are accepted with or without the /v1 that OpenAI clients
// put in their base URL.
//
// Every request needs the credentials of the project (Resolver.Authorize
// against the service it reaches, or against each listed one), also for
// a service with auth: false, as dstack's model endpoint does: the
// endpoint is the project's, and a service opened to everyone is open at
// its own address. The caller's gpud token never reaches the replica
// (the Forwarder removes it).
type Models struct {
	resolver ModelResolver
	forward  Forwarder
}

// ModelResolver is the part of the Resolver the model routes use (a
// Resolver is one).
type ModelResolver interface {
	Models(project string) []*Service
	Authorize(r *http.Request, svc *Service) error
}

// NewModels returns the model routes over res's services, forwarding
// through fwd.
func NewModels(res ModelResolver, fwd Forwarder) *Models {
	return &Models{resolver: res, forward: fwd}
}

// ServeHTTP serves a route registered as /proxy/models/{project}/{path...}.
func (m *Models) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.Serve(w, r, r.PathValue("project"), r.PathValue("path"))
}

// modelPaths maps the routes a client may call to the path under the
// model's prefix that the replica serves them at.
var modelPaths = map[string]string{
	"chat/completions": "/chat/completions",
	"completions":      "/completions",
	"embeddings":       "/embeddings",
}

// Serve answers a request for project's endpoint; route is the path after
// the endpoint's base (models, v1/chat/completions, ...). A host route
// (gateway.<domain>) calls it with the project it stands for.
func (m *Models) Serve(w http.ResponseWriter, r *http.Request, project, route string) {
	route = strings.Trim(route, "/")
	route = strings.TrimPrefix(route, "v1/")
	if route == "models" {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			openAIError(w, http.StatusMethodNotAllowed, "method_not_allowed", "GET lists the models; %s is not served", r.Method)
			return
		}
		m.list(w, r, project)
		return
	}
	replicaPath, ok := modelPaths[route]
	if !ok {
		openAIError(w, http.StatusNotFound, "not_found", "no model route %q: the endpoint serves v1/models, v1/chat/completions, v1/completions and v1/embeddings", route)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		openAIError(w, http.StatusMethodNotAllowed, "method_not_allowed", "%s takes POST with a JSON body, not %s", route, r.Method)
		return
	}
	m.route(w, r, project, replicaPath)
}

// modelEntry is one model in OpenAI's GET /v1/models answer.
type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// list answers GET models with the project's models that the caller may
// use; a caller who may use none is refused, so that a stranger cannot
// tell a project without models from a project it cannot see.
func (m *Models) list(w http.ResponseWriter, r *http.Request, project string) {
	svcs := m.resolver.Models(project)
	if len(svcs) == 0 {
		if err := m.resolver.Authorize(r, projectWide(project)); err != nil {
			unauthorized(w, project, err)
			return
		}
	}
	data := []modelEntry{}
	seen := map[string]bool{}
	var denied error
	for _, svc := range sortedModels(svcs) {
		if err := m.resolver.Authorize(r, svc); err != nil {
			denied = err
			continue
		}
		if seen[svc.Model.Name] {
			continue
		}
		seen[svc.Model.Name] = true
		data = append(data, modelEntry{ID: svc.Model.Name, Object: "model", OwnedBy: project})
	}
	if len(data) == 0 && denied != nil {
		unauthorized(w, project, denied)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(struct {
		Object string       `json:"object"`
		Data   []modelEntry `json:"data"`
	}{"list", data}); err != nil {
		return // the client went away; nothing left to tell it
	}
}

// modelRequest is what the router reads of a request body: the model it
// names. The rest of the body goes to the replica as the client sent it.
type modelRequest struct {
	Model *string `json:"model"`
}

// route sends a POST to the service that serves the body's model, at
// replicaPath under the model's prefix.
func (m *Models) route(w http.ResponseWriter, r *http.Request, project, replicaPath string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxModelRequestBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			openAIError(w, http.StatusRequestEntityTooLarge, "request_too_large", "the request body is over %d bytes", tooBig.Limit)
			return
		}
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "reading the request body: %v", err)
		return
	}
	var req modelRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "the body is not a JSON object with a string \"model\": %v", err)
		return
	}
	if req.Model == nil || *req.Model == "" {
		if err := m.resolver.Authorize(r, projectWide(project)); err != nil {
			unauthorized(w, project, err)
			return
		}
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "the body names no \"model\": add one of %s (GET v1/models lists them)", m.names(r, project))
		return
	}
	svc := m.serving(project, *req.Model)
	if svc == nil {
		if err := m.resolver.Authorize(r, projectWide(project)); err != nil {
			unauthorized(w, project, err)
			return
		}
		openAIError(w, http.StatusNotFound, "model_not_found", "model %q is not served in project %s; known models: %s", *req.Model, project, m.names(r, project))
		return
	}
	if err := m.resolver.Authorize(r, svc); err != nil {
		unauthorized(w, project, err)
		return
	}
	if svc.Model.Format != "" && svc.Model.Format != "openai" {
		openAIError(w, http.StatusNotImplemented, "unsupported_format", "model %q is served in format %s, which this gateway does not translate: use format openai (TGI serves the OpenAI API since 1.4)", *req.Model, svc.Model.Format)
		return
	}
	out := r.Clone(r.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.Header.Set("Content-Length", strconv.Itoa(len(body)))
	// The caller's token stays on: the Forwarder checks it against the
	// service again and removes it before the replica sees the request.
	out.URL.Path = ModelPrefix(svc.Model.Prefix) + replicaPath
	out.URL.RawPath = ""
	m.forward.Forward(w, out, svc)
}

// ModelPrefix is the path the model server serves the OpenAI API under:
// the model's prefix, /v1 by default (dstack's default).
// A prefix of "/" is the root: the replica serves /chat/completions.
func ModelPrefix(p string) string {
	if p == "" {
		return "/v1"
	}
	if p = strings.Trim(p, "/"); p == "" {
		return ""
	}
	return "/" + p
}

// serving finds the service that serves model in project. Two services
// that declare the same name: the first by run name takes the requests,
// so the choice does not change from one request to the next.
func (m *Models) serving(project, model string) *Service {
	for _, svc := range sortedModels(m.resolver.Models(project)) {
		if svc.Model.Name == model {
			return svc
		}
	}
	return nil
}

// names lists the models that r's caller may use in project, for an
// error message ("none" when there is none).
func (m *Models) names(r *http.Request, project string) string {
	var out []string
	for _, svc := range sortedModels(m.resolver.Models(project)) {
		if m.resolver.Authorize(r, svc) == nil && !slices.Contains(out, strconv.Quote(svc.Model.Name)) {
			out = append(out, strconv.Quote(svc.Model.Name))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// sortedModels is svcs with a model, ordered by run name (a copy: the
// Resolver's slice is not ours to reorder).
func sortedModels(svcs []*Service) []*Service {
	out := make([]*Service, 0, len(svcs))
	for _, s := range svcs {
		if s != nil && s.Model != nil && s.Model.Name != "" {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b *Service) int { return strings.Compare(a.Run, b.Run) })
	return out
}

// projectWide stands for the whole project when there is no service to
// authorize against (an unknown model, an empty list): it has no run, so
// only a project member's token passes, never a service's own key.
func projectWide(project string) *Service {
	return &Service{Project: project, Auth: true}
}

func unauthorized(w http.ResponseWriter, project string, err error) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="gpud"`)
	openAIError(w, http.StatusUnauthorized, "unauthorized", "the model endpoint of project %s needs a token of a project member: %v", project, err)
}

// openAIError writes an error in the shape OpenAI clients parse.
func openAIError(w http.ResponseWriter, status int, code, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	if status == http.StatusUnauthorized {
		typ = "authentication_error"
	}
	msg := fmt.Sprintf(format, args...)
	if err := json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code}}); err != nil {
		return // the client went away
	}
}
