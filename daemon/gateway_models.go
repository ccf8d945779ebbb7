package daemon

import (
	"net/http"
	"strings"

	"gpud.dev/gpud/proxy"
)

// handleModels serves a project's OpenAI-compatible endpoint,
// /proxy/models/{project}/{path...} (proxy.Models): the route's gate has
// already required a member of the project; proxy.Models picks the
// service by the body's model among the gateway resolver's snapshots and
// forwards through the gateway (the service's rate limits, auth, a ready
// replica, scale from zero), which strips the caller's token.
func (s *runsAPI) handleModels(w http.ResponseWriter, r *http.Request) error {
	proxy.NewModels(s.gwResolver, s.gw).ServeHTTP(w, r)
	return nil
}

// modelsHostLabel names the host of a domain that serves its project's
// model endpoint, as dstack's gateway.<domain>. It is reserved: a
// service named gateway is reached by path, not at gateway.<domain>.
const modelsHostLabel = "gateway"

// modelsAtHost finds the project whose model endpoint host serves:
// gateway.<domain> of a project's gateway, gateway.<server domain> for
// the default project, gateway.<project>.<server domain> for another.
// plain is whether it is served over plain HTTP (certificate: none).
func (s *Server) modelsAtHost(host string) (project string, plain, ok bool) {
	label, domain, found := strings.Cut(host, ".")
	if !found || label != modelsHostLabel {
		return "", false, false
	}
	for _, g := range s.gatewaysOf("") {
		if g.Domain == domain {
			return g.Project, g.Plain, true
		}
	}
	d := s.opts.Domain
	if d == "" {
		return "", false, false
	}
	if domain == d {
		return DefaultProject, s.opts.GatewayTLS == GatewayTLSNone, true
	}
	if p, under := strings.CutSuffix(domain, "."+d); under && p != "" && !strings.Contains(p, ".") {
		if _, err := s.store.Projects().Get(p); err == nil {
			return p, s.opts.GatewayTLS == GatewayTLSNone, true
		}
	}
	return "", false, false
}

// serveModelsHost serves a request for a model endpoint host
// (modelsAtHost) as the API's /proxy/models/<project>/ route, whose gate
// checks the caller's token; false for any other host.
func (s *Server) serveModelsHost(w http.ResponseWriter, r *http.Request, api http.Handler) bool {
	project, _, ok := s.modelsAtHost(requestHost(r))
	if !ok {
		return false
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/proxy/models/" + project + "/" + strings.TrimPrefix(r.URL.Path, "/")
	r2.URL.RawPath = ""
	api.ServeHTTP(w, r2)
	return true
}
