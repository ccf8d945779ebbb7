package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"

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
