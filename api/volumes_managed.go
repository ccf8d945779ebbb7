package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"time"
)

// ManagedVolumeRef names a gpud-managed volume to the agent that keeps
// it: the agent's directory for it is <data dir>/volumes/<Project>/<ID>,
// made from these two after CheckManagedVolumeRef, never from a path
// anyone sent.
type ManagedVolumeRef struct {
	Project string `json:"project"`
	// ID is the volume's random id (hex), fixed when it is applied.
	ID string `json:"id"`
	// Name is the volume's name, for messages only.
	Name string `json:"name,omitempty"`
	// Backend, set, is the project's backend (a Kubernetes backend's
	// name) that holds the volume: ID is then that backend's volume id
	// (the claim's name), which its jobs mount; no agent keeps it.
	Backend string `json:"backend,omitempty"`
}

var (
	managedProjectPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`)
	managedIDPattern      = regexp.MustCompile(`^[a-f0-9]{8,64}$`)
)

// CheckManagedVolumeRef refuses ids that could name anything but one
// directory below the volumes root: no `.`, `..` or `/`.
func CheckManagedVolumeRef(r ManagedVolumeRef) error {
	if !managedProjectPattern.MatchString(r.Project) {
		return fmt.Errorf("volume project %q: use letters, digits, '-' and '_'", r.Project)
	}
	if !managedIDPattern.MatchString(r.ID) {
		return fmt.Errorf("volume id %q: not a volume id (8-64 lowercase hex digits)", r.ID)
	}
	return nil
}

// VolumeUsage is what the agent reports of a managed volume's directory.
type VolumeUsage struct {
	Exists bool `json:"exists"`
	// Used is the bytes its files take (apparent size), -1 when the walk
	// was cut short.
	Used Size `json:"used"`
	// DiskFree is the free space of the filesystem it lives on.
	DiskFree Size `json:"disk_free"`
}

// Volume is a gpud-managed volume as `gpud volume list` shows it.
type Volume struct {
	Name    string `json:"name"`
	Project string `json:"project"`
	Backend string `json:"backend"`
	// Status is submitted (no job has used it yet, so it lives on no
	// host) or active (its directory is on Instance).
	Status   string `json:"status"`
	Instance string `json:"instance,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	// Size is the configuration's size (0: none); Used the bytes its
	// files take, when its host answered (-1: unknown).
	Size Size `json:"size,omitempty"`
	Used Size `json:"used"`
	// AutoCleanupDuration is how long it may stay unused before the
	// server deletes it ("" or "off": never).
	AutoCleanupDuration string `json:"auto_cleanup_duration,omitempty"`
	// Runs are the active runs that use it.
	Runs      []string  `json:"runs"`
	LastUsed  time.Time `json:"last_used,omitzero"`
	CreatedAt time.Time `json:"created_at"`
	User      string    `json:"user,omitempty"`
	// Configuration is the normalized volume configuration.
	Configuration json.RawMessage `json:"configuration,omitempty"`
	// Of a volume on a project's backend (Backend is then its name):
	// the backend's type, the claim (the backend's volume id), whether
	// it was registered (claim_name: never deleted by gpud), and the
	// backend's state of it (Pending, Bound).
	BackendType string `json:"backend_type,omitempty"`
	Claim       string `json:"claim,omitempty"`
	Registered  bool   `json:"registered,omitempty"`
	State       string `json:"state,omitempty"`
}

// ApplyVolume creates or updates a volume from its configuration.
func (c *Client) ApplyVolume(ctx context.Context, project string, req ApplyRequest) (Volume, error) {
	var v Volume
	return v, c.call(ctx, http.MethodPost, projectPath(project, "/volumes/apply"), req, &v, true)
}

// ListVolumes returns the project's volumes.
func (c *Client) ListVolumes(ctx context.Context, project string) ([]Volume, error) {
	var vs []Volume
	return vs, c.get(ctx, projectPath(project, "/volumes"), &vs)
}

// DeleteVolume deletes a volume and its data; an active run using it
// answers 409 naming the run.
func (c *Client) DeleteVolume(ctx context.Context, project, name string) error {
	return c.del(ctx, projectPath(project, "/volumes/"+url.PathEscape(name)), nil)
}
