package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/store"
)

// The backends API: a project's admins add and delete its backends, its
// members list them. A backend's configuration (credentials) goes in once,
// through add, and never comes out: list shows type, plugin and state. A
// project's backends are invisible to every other project, as every route
// is under {project} and each record's id starts with it.

// backendAddTimeout bounds an add's plugin start and Check.
const backendAddTimeout = 2 * time.Minute

func (s *Server) backendOut(rec store.Record) api.Backend {
	var spec backendSpec
	if err := json.Unmarshal(rec.Spec, &spec); err != nil {
		s.log.Error().Err(err).Str("backend", rec.ID).Msg("backend record unreadable")
	}
	out := api.Backend{Project: rec.Project, Name: rec.Name, Type: spec.Type, Source: spec.Source,
		CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, State: plugins.StateFailed}
	s.backends.mu.Lock()
	e := s.backends.entries[rec.ID]
	gangs := 0
	if e != nil {
		gangs = len(e.gangs)
	}
	s.backends.mu.Unlock()
	if e == nil {
		out.LastError = "not started"
		return out
	}
	out.Plugin, out.External, out.Gangs = e.plugin, e.external, gangs
	if e.sup == nil {
		out.LastError = e.startErr
		return out
	}
	st := e.sup.State()
	out.State, out.LastError, out.Restarts, out.Pid = st.State, st.LastError, st.Restarts, st.Pid
	out.Protocol, out.PluginVersion = st.Info.Protocol, st.Info.Version
	out.Jobs, out.Instances, out.Volumes = st.Info.Jobs, st.Info.Instances, st.Info.Volumes
	return out
}

func (s *Server) handleListBackends(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	out := []api.Backend{}
	for _, rec := range s.store.Backends().ByProject(project) {
		out = append(out, s.backendOut(rec))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeJSON(w, http.StatusOK, out)
	return nil
}

// handleAddBackend starts the backend's plugin with its configuration and
// runs Check before anything is stored: a bad configuration is refused
// here, naming the field, and whatever was stored (a backend of the same
// name included) stays as it was.
func (s *Server) handleAddBackend(w http.ResponseWriter, r *http.Request) error {
	project, c, err := s.authorize(r, api.RoleAdmin)
	if err != nil {
		return err
	}
	var req api.AddBackendRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.Type == "" {
		return badField("type", "required: kubernetes, slurm, or an external plugin's type")
	}
	if req.Name == "" {
		req.Name = req.Type
	}
	if err := checkBackendName(req.Name); err != nil {
		return badField("name", "%v", err)
	}
	config := bytes.TrimSpace(req.Config)
	if len(config) == 0 || bytes.Equal(config, []byte("null")) {
		config = []byte("{}")
	}
	if config[0] != '{' {
		return badField("config", "the backend's fields as a JSON object")
	}
	if !c.admin {
		if err := checkServerLocal(config); err != nil {
			return badField("config", "%v", err)
		}
		var fields map[string]any
		if err := json.Unmarshal(config, &fields); err != nil {
			return badField("config", "%v", err)
		}
		if err := checkBackendAddresses(r.Context(), fields); err != nil { // backends_ssrf.go
			return badField("config", "%v", err)
		}
		if req.Type == "kubernetes" || req.Type == "aws" {
			// Its plugin refuses those addresses at each connection too.
			fields["deny_server_network"] = true
			if config, err = json.Marshal(fields); err != nil {
				return err
			}
		}
	}
	id := backendID(project, req.Name)
	s.backends.ops.Lock()
	defer s.backends.ops.Unlock()
	old, oldErr := s.store.Backends().Get(id)
	if oldErr == nil && s.backendSource(old) == backendSourceConfig {
		return conflict("backend %s comes from the server's configuration file: change it there", req.Name)
	}
	ctx, cancel := context.WithTimeout(r.Context(), backendAddTimeout)
	defer cancel()
	if _, _, _, err := s.backendLaunch(req.Type); err != nil {
		return badField("type", "%v", err)
	}
	e, err := s.startBackend(ctx, project, req.Name, req.Type, config)
	var version *plugins.VersionError
	if errors.As(err, &version) {
		return badField("type", "%v", err)
	}
	if err != nil {
		return badField("config", "%v", err)
	}
	if err := e.sup.Check(ctx); err != nil {
		e.sup.Close()
		return badField("config", "%s backend %s: %v", req.Type, req.Name, err)
	}
	spec, err := json.Marshal(backendSpec{Type: req.Type, Source: backendSourceAPI})
	if err != nil {
		e.sup.Close()
		return err
	}
	rec := store.Record{Kind: store.KindBackend, ID: id, Project: project, Name: req.Name, User: c.name, Spec: spec, Sealed: config}
	if _, err := s.store.Apply(ctx, store.Put(rec), s.event(project, store.KindBackend, id, "added", req.Type+" backend added by "+c.name)); err != nil {
		e.sup.Close()
		return err
	}
	s.backends.mu.Lock()
	prev := s.backends.entries[id]
	s.backends.entries[id] = e
	s.backends.mu.Unlock()
	if prev != nil && prev.sup != nil {
		prev.sup.Close()
	}
	stored, err := s.store.Backends().Get(id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.backendOut(stored))
	return nil
}

func (s *Server) backendSource(rec store.Record) string {
	var spec backendSpec
	if err := json.Unmarshal(rec.Spec, &spec); err != nil {
		return ""
	}
	return spec.Source
}

// handleDeleteBackend stops a backend's plugin and removes its
// configuration; it refuses while the backend runs gangs (stop their runs
// first) or keeps volumes (delete them first: their claims would be left
// behind unseen), and for backends of the configuration file.
func (s *Server) handleDeleteBackend(w http.ResponseWriter, r *http.Request) error {
	project, c, err := s.authorize(r, api.RoleAdmin)
	if err != nil {
		return err
	}
	name := r.PathValue("backend")
	id := backendID(project, name)
	s.backends.ops.Lock()
	defer s.backends.ops.Unlock()
	rec, err := s.store.Backends().Get(id)
	if err != nil || rec.Project != project {
		return notFound("backend", name)
	}
	if s.backendSource(rec) == backendSourceConfig {
		return conflict("backend %s comes from the server's configuration file: remove it there", name)
	}
	if vols := s.backendVolumesOf(project, name); len(vols) > 0 {
		return conflict("backend %s keeps volumes %s: delete them first (gpud volume delete)", name, strings.Join(vols, ", "))
	}
	s.backends.mu.Lock()
	e := s.backends.entries[id]
	s.backends.mu.Unlock()
	if e != nil && e.sup != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		gangs, err := e.sup.List(ctx)
		cancel()
		if err != nil && !errors.Is(err, plugins.ErrUnsupported) {
			return conflict("backend %s: cannot tell whether it runs gangs (%v): try again", name, err)
		}
		if len(gangs) > 0 {
			return conflict("backend %s runs gangs %s: stop their runs first", name, strings.Join(gangs, ", "))
		}
	}
	if _, err := s.store.Apply(r.Context(), store.Delete(store.KindBackend, id),
		s.event(project, store.KindBackend, id, "deleted", "deleted by "+c.name)); err != nil {
		return err
	}
	s.backends.mu.Lock()
	delete(s.backends.entries, id)
	s.backends.mu.Unlock()
	if e != nil && e.sup != nil {
		e.sup.Close()
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
