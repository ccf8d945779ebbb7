package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Upload is a stored archive of a run's repos and files.
type Upload struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Upload sends the archive body (size bytes, whose SHA-256 is sum) to the
// project. The size is declared up front (Content-Length) and the body is
// sent only after the server's "100 Continue", so a server that refuses
// the size (413) does so before a byte of the body travels. It is sent
// once: body is read as it goes.
func (c *Client) Upload(ctx context.Context, project, sum string, size int64, body io.Reader) (Upload, error) {
	var out Upload
	path := projectPath(project, "/uploads/"+sum)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base+path, body)
	if err != nil {
		return out, fmt.Errorf("PUT %s: %w", path, err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/gzip")
	req.Header.Set("Expect", "100-continue")
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	hc := c.http
	if t, ok := hc.Transport.(*http.Transport); ok || hc.Transport == nil {
		if !ok {
			t = http.DefaultTransport.(*http.Transport)
		}
		if t.ExpectContinueTimeout == 0 {
			t = t.Clone()
			t.ExpectContinueTimeout = 5 * time.Second
			cp := *hc
			cp.Transport = t
			hc = &cp
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return out, fmt.Errorf("PUT %s: %w", path, ctx.Err())
		}
		return out, fmt.Errorf("server %s: upload: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return out, decodeError(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("PUT %s: decode the answer: %w", path, err)
	}
	return out, nil
}
