package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// The server's configuration file (gpud serve --config FILE), like
// dstack's ~/.dstack/server/config.yml:
//
//	projects:
//	  - name: main
//	    backends:
//	      - type: kubernetes
//	        name: k8s          # optional, default the type
//	        kubeconfig: ...    # the type's own fields
//
// It is applied at start: each backend listed is checked through its
// plugin and stored (sealed) with source "config", replacing one of the
// same name; `gpud backend delete` refuses those (edit the file instead).

// serverConfig is the file's shape.
type serverConfig struct {
	Projects []struct {
		Name     string           `yaml:"name"`
		Backends []map[string]any `yaml:"backends"`
	} `yaml:"projects"`
}

var backendNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)

// checkBackendName refuses names that could not be a path segment.
func checkBackendName(name string) error {
	if !backendNameRE.MatchString(name) {
		return fmt.Errorf("%q: use lowercase letters, digits and '-', starting with a letter (at most 40)", name)
	}
	return nil
}

// applyConfigFile stores the backends of Options.ConfigFile; any error
// names the file and the entry, and fails the start.
func (s *Server) applyConfigFile(ctx context.Context) error {
	path := s.opts.ConfigFile
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("server configuration: %w", err)
	}
	var cfg serverConfig
	if err := api.DecodeYAML(path, data, &cfg); err != nil {
		return err
	}
	for i, p := range cfg.Projects {
		if _, err := s.store.Projects().Get(p.Name); err != nil {
			return fmt.Errorf("%s: projects[%d].name: no project %q on this server (create it first: gpud admin project create)", path, i, p.Name)
		}
		for j, b := range p.Backends {
			where := fmt.Sprintf("%s: projects[%d].backends[%d]", path, i, j)
			typ, _ := b["type"].(string)
			if typ == "" {
				return fmt.Errorf("%s.type: required (kubernetes, slurm, or an external plugin's type)", where)
			}
			name, _ := b["name"].(string)
			if name == "" {
				name = typ
			}
			if err := checkBackendName(name); err != nil {
				return fmt.Errorf("%s.name: %w", where, err)
			}
			fields := map[string]any{}
			for k, v := range b {
				if k != "type" && k != "name" {
					fields[k] = v
				}
			}
			config, err := json.Marshal(fields)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if err := s.storeConfiguredBackend(ctx, p.Name, name, typ, config); err != nil {
				return fmt.Errorf("%s (%s): %w", where, name, err)
			}
		}
	}
	return nil
}

// storeConfiguredBackend checks one backend of the configuration file
// through its plugin and stores it, unless the same one is stored already.
func (s *Server) storeConfiguredBackend(ctx context.Context, project, name, typ string, config []byte) error {
	id := backendID(project, name)
	spec, err := json.Marshal(backendSpec{Type: typ, Source: backendSourceConfig})
	if err != nil {
		return err
	}
	if old, err := s.store.Backends().Get(id); err == nil && bytes.Equal(old.Spec, spec) && bytes.Equal(old.Sealed, config) {
		return nil
	}
	e, err := s.startBackend(ctx, project, name, typ, config)
	if err != nil {
		return err
	}
	defer e.sup.Close() // startBackends starts it again from the record
	if err := e.sup.Check(ctx); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	rec := store.Record{Kind: store.KindBackend, ID: id, Project: project, Name: name, Spec: spec, Sealed: config}
	_, err = s.store.Apply(ctx, store.Put(rec), s.event(project, store.KindBackend, id, "configured", "from the server's configuration file"))
	return err
}

// checkServerLocal refuses, for a caller who is not a global admin, a
// backend configuration that would make the server act as itself: a path
// on the server's host (a kubeconfig file, any file: the plugin reads it
// with the server's rights, and its errors could quote it) or the server's
// own in-cluster identity. A project admin gives the contents instead
// (kubeconfig_data); the server's own files and identity are for global
// admins and the server's configuration file.
func checkServerLocal(config []byte) error {
	var fields map[string]any
	if err := json.Unmarshal(config, &fields); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var walk func(path string, v any) error
	walk = func(path string, v any) error {
		switch v := v.(type) {
		case string:
			if strings.HasPrefix(v, "/") || strings.HasPrefix(v, "~") || strings.HasPrefix(v, "file:") || strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../") {
				return fmt.Errorf("%s: %q is a path on the server's host, which only a global admin may name (give the file's contents instead, like kubeconfig_data)", path, v)
			}
		case bool:
			if v && strings.HasSuffix(path, "in_cluster") {
				return fmt.Errorf("%s: the server's own in-cluster identity is for global admins only", path)
			}
		case map[string]any:
			for k, x := range v {
				if err := walk(path+"."+k, x); err != nil {
					return err
				}
			}
		case []any:
			for i, x := range v {
				if err := walk(fmt.Sprintf("%s[%d]", path, i), x); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for k, v := range fields {
		if err := walk(k, v); err != nil {
			return err
		}
	}
	return nil
}
