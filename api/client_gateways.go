package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Gateway is a gateway as the server reports it: the domain a project's
// services are served at and how their certificates come.
type Gateway struct {
	Name    string `json:"name"`
	Project string `json:"project"`
	Domain  string `json:"domain"`
	// Default: services that name no gateway use this one.
	Default bool `json:"default"`
	// Certificate is lets-encrypt (the server's ACME CA, or its internal
	// CA when it runs with --tls internal) or none (plain HTTP).
	Certificate string `json:"certificate"`
	// ServiceURL is the URL pattern of its services, like
	// https://<run>.example.com; Listening is false while the server
	// runs no gateway listener (gpud serve without --domain or
	// --https-listen), so the gateway is stored but serves nothing yet.
	ServiceURL string    `json:"service_url"`
	Listening  bool      `json:"listening"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// ListGateways returns the project's gateways.
func (c *Client) ListGateways(ctx context.Context, project string) ([]Gateway, error) {
	var gs []Gateway
	return gs, c.get(ctx, projectPath(project, "/gateways"), &gs)
}

// DeleteGateway removes a gateway; its services fall back to the server's
// own domain, or to path routing.
func (c *Client) DeleteGateway(ctx context.Context, project, name string) error {
	return c.del(ctx, projectPath(project, "/gateways/"+url.PathEscape(name)), nil)
}

// GatewayCA returns the PEM of the server's gateway CA (a server started
// with --tls internal); clients trust it to reach its services over HTTPS.
func (c *Client) GatewayCA(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/gateway/ca.pem", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the server has no gateway CA (it issues certificates over ACME, or runs without --domain): %s", resp.Status)
	}
	return b, nil
}

// GatewayHost is the service a hostname reaches, as the server tells a
// standalone gateway (`gpud gateway --server`).
type GatewayHost struct {
	Host    string `json:"host"`
	Project string `json:"project"`
	Run     string `json:"run"`
	// Plain: served over plain HTTP (its gateway has certificate: none,
	// or the service says https: false).
	Plain bool `json:"plain"`
}

// GatewayHost asks which service host reaches; a host that reaches no
// active service of a project the caller belongs to is a 404.
func (c *Client) GatewayHost(ctx context.Context, host string) (GatewayHost, error) {
	var h GatewayHost
	return h, c.get(ctx, "/api/v1/gateway/hosts/"+url.PathEscape(host), &h)
}
