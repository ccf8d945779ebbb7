package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"gpud.dev/gpud/api"
)

// HasUpload reports whether the agent holds the upload archive sum.
func (c *Client) HasUpload(ctx context.Context, sum string) (bool, error) {
	resp, err := c.raw(ctx, http.MethodHead, "/api/v1/uploads/"+sum, nil, 0)
	if err != nil {
		if IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	resp.Body.Close()
	return true, nil
}

// PutUpload sends the upload archive sum (size bytes) to the agent, which
// checks its SHA-256 and entries before keeping it.
func (c *Client) PutUpload(ctx context.Context, sum string, size int64, body io.Reader) error {
	resp, err := c.raw(ctx, http.MethodPut, "/api/v1/uploads/"+sum, body, size)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// raw sends a request with an opaque body and turns non-2xx answers into
// *Error, as send does for JSON.
func (c *Client) raw(ctx context.Context, method, path string, body io.Reader, size int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/gzip")
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e api.AgentError
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return nil, &Error{Status: resp.StatusCode, Message: msg}
}
