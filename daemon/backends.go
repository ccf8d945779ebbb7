package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// Backends (issue 17, docs/backends.md): each project's configured
// backends, each a plugin subprocess under a plugins.Supervisor. A backend
// is a store record (KindBackend, ID "project/name") whose Spec is
// backendSpec and whose Sealed value is its configuration, credentials
// included: sealed at rest, never returned by the API nor logged.

// backendSpec is what a backend record keeps in the clear.
type backendSpec struct {
	Type string `json:"type"`
	// Source is "api" (gpud backend add) or "config" (--config FILE).
	Source string `json:"source"`
}

const (
	backendSourceAPI    = "api"
	backendSourceConfig = "config"
)

// backendSet holds the running plugins, by record id. ops serializes
// adds and deletes, so that two adds of one name cannot both start.
type backendSet struct {
	ops sync.Mutex

	mu      sync.Mutex
	entries map[string]*backendEntry

	// capacity is the job backends' offers as scheduler nodes
	// (backend_capacity.go).
	capacity backendCapacity
	// autoscale is the backend fleets' autoscaler (fleet_autoscale.go).
	autoscale fleetAutoscaler
}

// backendEntry is one configured backend's plugin.
type backendEntry struct {
	project, name, typ string
	// plugin is "built-in" or the external executable's path.
	plugin   string
	external bool
	sup      *plugins.Supervisor // nil when it failed to start
	startErr string
	// gangs is what the plugin reported at its last (re)start (guarded by
	// backendSet.mu).
	gangs map[string][]api.JobStatus
}

func backendID(project, name string) string { return project + "/" + name }

// Backends returns the project's backends by name: each a plugins.Backend
// whatever process runs it (calls made while its plugin restarts wait for
// it). Backends whose plugin failed to start are left out. The scheduler
// and the dispatcher reach job backends (StartGang...) through it.
func (s *Server) Backends(project string) map[string]plugins.Backend {
	out := map[string]plugins.Backend{}
	s.backends.mu.Lock()
	defer s.backends.mu.Unlock()
	for _, e := range s.backends.entries {
		if e.project == project && e.sup != nil {
			out[e.name] = e.sup
		}
	}
	return out
}

// BackendGangs returns the gangs a backend reported at its plugin's last
// (re)start, by gang id, so whoever dispatches to it re-reads its work.
func (s *Server) BackendGangs(project, name string) map[string][]api.JobStatus {
	s.backends.mu.Lock()
	defer s.backends.mu.Unlock()
	if e := s.backends.entries[backendID(project, name)]; e != nil {
		return e.gangs
	}
	return nil
}

// pluginDir is where external plugins are found (default DATA_DIR/plugins).
func (s *Server) pluginDir() string {
	if s.opts.PluginDir != "" {
		return s.opts.PluginDir
	}
	return filepath.Join(s.opts.DataDir, "plugins")
}

// backendLaunch resolves a backend type to the command that serves it: a
// built-in (this gpud, `plugin serve TYPE`) or gpud-backend-TYPE in the
// plugin directory, refused when others may write it.
func (s *Server) backendLaunch(typ string) (command []string, plugin string, external bool, err error) {
	for _, b := range s.opts.BuiltinBackends {
		if b == typ {
			cmd := s.opts.PluginCommand
			if len(cmd) == 0 {
				exe, err := os.Executable()
				if err != nil {
					return nil, "", false, fmt.Errorf("built-in backend %s: %w", typ, err)
				}
				cmd = []string{exe, "plugin", "serve"}
			}
			return append(append([]string{}, cmd...), typ), "built-in", false, nil
		}
	}
	exts, err := plugins.Discover(s.pluginDir())
	if err != nil {
		return nil, "", false, err
	}
	var names []string
	for _, e := range exts {
		if e.Type != typ {
			names = append(names, e.Type)
			continue
		}
		if e.Refused != nil {
			return nil, "", false, fmt.Errorf("external backend plugin %s: %w", e.Path, e.Refused)
		}
		return []string{e.Path}, e.Path, true, nil
	}
	return nil, "", false, fmt.Errorf("unknown backend type %q: built in: %s; external plugins in %s: %s", typ,
		orNone(s.opts.BuiltinBackends), s.pluginDir(), orNone(names))
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

// startBackend starts the plugin of one backend configuration and reads
// the gangs it runs; an error leaves nothing running.
func (s *Server) startBackend(ctx context.Context, project, name, typ string, config []byte) (*backendEntry, error) {
	cmd, plugin, external, err := s.backendLaunch(typ)
	if err != nil {
		return nil, err
	}
	e := &backendEntry{project: project, name: name, typ: typ, plugin: plugin, external: external}
	id := backendID(project, name)
	sup, err := plugins.Start(ctx, plugins.Launch{Name: id, Command: cmd, Config: config}, plugins.SupervisorOptions{
		Log: s.log.With().Str("project", project).Str("backend", name).Logger(),
		OnRestart: func(gangs map[string][]api.JobStatus) {
			s.backends.mu.Lock()
			e.gangs = gangs
			s.backends.mu.Unlock()
		},
	})
	if err != nil {
		return nil, err
	}
	e.sup = sup
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	gangs, err := plugins.ReadGangs(rctx, sup)
	if err != nil && !errors.Is(err, plugins.ErrUnsupported) {
		s.log.Warn().Err(err).Str("project", project).Str("backend", name).Msg("read the backend's gangs")
	}
	e.gangs = gangs
	return e, nil
}

// startBackends starts every stored backend's plugin (server start). One
// that fails stays listed as failed with its error; the server starts.
func (s *Server) startBackends(ctx context.Context) error {
	s.backends = &backendSet{entries: map[string]*backendEntry{}}
	if err := s.applyConfigFile(ctx); err != nil {
		return err
	}
	for _, rec := range s.store.Backends().List() {
		var spec backendSpec
		if err := json.Unmarshal(rec.Spec, &spec); err != nil {
			s.log.Error().Err(err).Str("backend", rec.ID).Msg("backend record unreadable; skipped")
			continue
		}
		e, err := s.startBackend(ctx, rec.Project, rec.Name, spec.Type, rec.Sealed)
		if err != nil {
			s.log.Error().Err(err).Str("project", rec.Project).Str("backend", rec.Name).Msg("backend plugin did not start")
			e = &backendEntry{project: rec.Project, name: rec.Name, typ: spec.Type, startErr: err.Error()}
		}
		s.backends.mu.Lock()
		s.backends.entries[rec.ID] = e
		s.backends.mu.Unlock()
	}
	s.startJobBackends() // their capacity and jobs (backend_capacity.go)
	return nil
}

// closeBackends shuts every plugin down (server close).
func (s *Server) closeBackends() {
	if s.backends == nil {
		return
	}
	s.backends.mu.Lock()
	entries := s.backends.entries
	s.backends.entries = map[string]*backendEntry{}
	s.backends.mu.Unlock()
	var wg sync.WaitGroup
	for _, e := range entries {
		if e.sup != nil {
			wg.Go(e.sup.Close)
		}
	}
	wg.Wait()
}

// backendOffers asks the project's backends for offers that fit one job of
// req, all at once, each bounded in time (a slow or restarting backend
// offers nothing this time, and says so in the log), cheapest first.
func (s *Server) backendOffers(project string, req taskRequest) []api.Offer {
	backends := s.Backends(project)
	if len(backends) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	q := plugins.OfferQuery{GPUName: req.GPUName, GPUs: int((req.GPU + 999) / 1000)}
	var mu sync.Mutex
	var out []api.Offer
	var wg sync.WaitGroup
	for name, b := range backends {
		wg.Go(func() {
			offers, err := b.Offers(ctx, q)
			if err != nil {
				s.log.Warn().Err(err).Str("project", project).Str("backend", name).Msg("backend offers")
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, o := range offers {
				r := o.Resources
				if r.GPUs*1000 < float64(req.GPU) || r.CPUs*1000 < float64(req.CPU) || int64(r.Memory) < req.Memory {
					continue
				}
				if req.GPUName != "" && !gpuNameMatches(r.GPUName, req.GPUName) {
					continue
				}
				o.Backend = name
				out = append(out, o)
			}
		})
	}
	wg.Wait()
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Price != out[j].Price {
			return out[i].Price < out[j].Price
		}
		return out[i].Backend < out[j].Backend
	})
	return out
}
