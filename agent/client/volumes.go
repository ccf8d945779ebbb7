package client

import (
	"context"
	"net/http"
	"net/url"

	"gpud.dev/gpud/api"
)

func volumePath(ref api.ManagedVolumeRef) string {
	return "/api/v1/volumes/" + url.PathEscape(ref.Project) + "/" + url.PathEscape(ref.ID) + "?name=" + url.QueryEscape(ref.Name)
}

// VolumeUsage measures a managed volume's directory on the host.
func (c *Client) VolumeUsage(ctx context.Context, ref api.ManagedVolumeRef) (api.VolumeUsage, error) {
	var u api.VolumeUsage
	return u, c.do(ctx, http.MethodGet, volumePath(ref), nil, &u)
}

// RemoveVolume deletes a managed volume's directory and data; 409 while a
// job of the host mounts it.
func (c *Client) RemoveVolume(ctx context.Context, ref api.ManagedVolumeRef) error {
	return c.do(ctx, http.MethodDelete, volumePath(ref), nil, nil)
}
