package api

import (
	"context"
	"net/url"
	"time"
)

// ServiceKeyPrefix starts every per-service key, so that a key is told
// from a user token at a glance (and by secret scanners).
const ServiceKeyPrefix = "gpud_sk_"

// ServiceKey is a per-service key as the server reports it. Key is set
// only in the answer to its creation: the server keeps its SHA-256 and
// never shows it again.
type ServiceKey struct {
	Name    string `json:"name"`
	Project string `json:"project"`
	// Run is the service's run name: the key opens every run of that name
	// in the project (a rolling update or a re-apply keeps it working).
	Run        string     `json:"run"`
	CreatedBy  string     `json:"created_by"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	Key        string     `json:"key,omitempty"`
}

// CreateServiceKeyRequest names a new key; an empty name gets one made up.
type CreateServiceKeyRequest struct {
	Name string `json:"name,omitempty"`
}

func serviceKeysPath(project, run string) string {
	return projectPath(project, "/runs/"+url.PathEscape(run)+"/keys")
}

// CreateServiceKey makes a key for the service run; the answer holds the
// key, shown this once.
func (c *Client) CreateServiceKey(ctx context.Context, project, run, name string) (ServiceKey, error) {
	var k ServiceKey
	return k, c.post(ctx, serviceKeysPath(project, run), CreateServiceKeyRequest{Name: name}, &k)
}

// ListServiceKeys lists the keys of the service run (never the keys).
func (c *Client) ListServiceKeys(ctx context.Context, project, run string) ([]ServiceKey, error) {
	var ks []ServiceKey
	return ks, c.get(ctx, serviceKeysPath(project, run), &ks)
}

// RevokeServiceKey revokes a key of the service run: it stops opening the
// service at once.
func (c *Client) RevokeServiceKey(ctx context.Context, project, run, name string) error {
	return c.del(ctx, serviceKeysPath(project, run)+"/"+url.PathEscape(name), nil)
}
