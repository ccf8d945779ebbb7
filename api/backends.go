package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// Backend is a configured backend of a project as `gpud backend list`
// shows it: never its configuration, which holds credentials.
type Backend struct {
	Project string `json:"project"`
	Name    string `json:"name"`
	Type    string `json:"type"`
	// Plugin is "built-in" (a subprocess of gpud itself) or the path of
	// the external plugin executable.
	Plugin   string `json:"plugin"`
	External bool   `json:"external"`
	// Protocol and PluginVersion are what the plugin answered.
	Protocol      int    `json:"protocol,omitempty"`
	PluginVersion string `json:"plugin_version,omitempty"`
	// State is running, restarting, failed or stopped; LastError says why
	// the plugin last died or failed to start.
	State     string `json:"state"`
	LastError string `json:"last_error,omitempty"`
	Restarts  int    `json:"restarts"`
	Pid       int    `json:"pid,omitempty"`
	// Gangs is how many gangs the backend reported running at its last
	// (re)start.
	Gangs int `json:"gangs"`
	// Jobs, Instances, Volumes: what the backend supports.
	Jobs      bool `json:"jobs,omitempty"`
	Instances bool `json:"instances,omitempty"`
	Volumes   bool `json:"volumes,omitempty"`
	// Source is "api" (gpud backend add) or "config" (the server's
	// configuration file).
	Source    string    `json:"source"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// AddBackendRequest adds (or replaces) a project's backend. Config holds
// the type-specific fields (kubeconfig, credentials...) as a JSON object;
// the server checks them through the plugin before storing them sealed.
type AddBackendRequest struct {
	Name   string          `json:"name"`
	Type   string          `json:"type"`
	Config json.RawMessage `json:"config"`
}

// AddBackend checks and stores a backend (replacing one of the same name).
func (c *Client) AddBackend(ctx context.Context, project string, req AddBackendRequest) (Backend, error) {
	var b Backend
	return b, c.call(ctx, http.MethodPost, projectPath(project, "/backends"), req, &b, true)
}

// ListBackends lists the project's backends.
func (c *Client) ListBackends(ctx context.Context, project string) ([]Backend, error) {
	var bs []Backend
	return bs, c.get(ctx, projectPath(project, "/backends"), &bs)
}

// DeleteBackend stops a backend's plugin and removes its configuration.
func (c *Client) DeleteBackend(ctx context.Context, project, name string) error {
	return c.del(ctx, projectPath(project, "/backends/"+url.PathEscape(name)), nil)
}
