package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"gpud.dev/gpud/api"
)

// SSH opens an SSH stream into job id (agent/sshd): the agent accepts on
// it only the client holding the key of authorizedKey (an authorized_keys
// line), and user names the gpud user for its logs. The stream is closed
// by closing the returned value.
func (c *Client) SSH(ctx context.Context, id, authorizedKey, user string) (io.ReadWriteCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/jobs/"+url.PathEscape(id)+"/ssh", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", api.SSHProtocol)
	req.Header.Set(api.HeaderSSHAuthorizedKey, strings.TrimSpace(authorizedKey))
	req.Header.Set(api.HeaderSSHUser, user)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent ssh %s: %w", id, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e api.AgentError
		if jsonErr := decodeError(b, &e); jsonErr != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return nil, &Error{Status: resp.StatusCode, Message: e.Error}
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("agent ssh %s: the transport cannot carry an upgraded stream", id)
	}
	return rwc, nil
}

func decodeError(b []byte, e *api.AgentError) error { return json.Unmarshal(b, e) }
