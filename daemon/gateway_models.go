package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/proxy"
	"gpud.dev/gpud/store"
)

// handleModels serves a project's OpenAI-compatible endpoint,
// /proxy/models/{project}/{path...} (proxy.Models): the route's gate has
// already required a member of the project; proxy.Models picks the
// service by the body's model and forwards through the service proxy.
func (s *runsAPI) handleModels(w http.ResponseWriter, r *http.Request) error {
	proxy.NewModels(modelServices{s}, modelForwarder{s}).ServeHTTP(w, r)
	return nil
}

// modelServices is the server's side of the model routes: the project's
// active services that declare a model, and the project's authorization.
type modelServices struct{ s *runsAPI }

var _ proxy.ModelResolver = modelServices{}

// Models lists project's active services with a model.
func (m modelServices) Models(project string) []*proxy.Service {
	var out []*proxy.Service
	for _, run := range m.s.store.Runs().ByProject(project) {
		if finishedRun(run.Status) {
			continue
		}
		sm, err := cachedFor(m.s.Server, run, "model", serviceModelOf)
		if err != nil || sm.Model == nil {
			continue // a corrupt record is logged once by cachedFor
		}
		out = append(out, &proxy.Service{Project: project, Run: run.Name, Auth: sm.Auth, StripPrefix: sm.StripPrefix, Model: sm.Model})
	}
	return out
}

// Authorize lets a member of svc's project through: the token the route's
// gate checked, in the project the path names (the only project whose
// services Models lists).
func (m modelServices) Authorize(r *http.Request, svc *proxy.Service) error {
	if svc.Project != r.PathValue("project") {
		return fmt.Errorf("service %s is not in project %s", svc.Key(), r.PathValue("project"))
	}
	_, _, err := m.s.authorize(r, api.RoleUser)
	return err
}

// serviceModel is what the model routes read of a run: a service's model
// and auth, decoded once per record version.
type serviceModel struct {
	Model       *api.Model
	Auth        bool
	StripPrefix bool
}

func serviceModelOf(r store.Record) (serviceModel, error) {
	rs, err := decodeSpec[runState](r)
	if err != nil || rs.Type != api.KindService || len(rs.Config) == 0 {
		return serviceModel{}, err
	}
	var cfg struct {
		Model       *api.Model `json:"model"`
		Auth        bool       `json:"auth"`
		StripPrefix bool       `json:"strip_prefix"`
	}
	if err := json.Unmarshal(rs.Config, &cfg); err != nil {
		return serviceModel{}, &corruptRecordError{Kind: r.Kind, ID: r.ID, Part: "spec", Err: err}
	}
	return serviceModel{Model: cfg.Model, Auth: cfg.Auth, StripPrefix: cfg.StripPrefix}, nil
}

// modelForwarder forwards a model request through the server's service
// proxy (proxyService: a ready replica, scale from zero, streaming
// flushed as it comes, the caller's token removed).
//
// TODO(issue 16): forward through proxy.Gateway.ServeService (it
// satisfies proxy.Forwarder) once the server serves /proxy/services with
// the Gateway.
type modelForwarder struct{ s *runsAPI }

var _ proxy.Forwarder = modelForwarder{}

// Forward serves r, whose path is the replica's, for svc.
func (f modelForwarder) Forward(w http.ResponseWriter, r *http.Request, svc *proxy.Service) {
	f.s.route(func(w http.ResponseWriter, r *http.Request) error {
		run, err := f.s.findRun(svc.Project, svc.Run)
		if err != nil {
			return err
		}
		return f.s.proxyService(w, r, run, false)
	}).ServeHTTP(w, r)
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
