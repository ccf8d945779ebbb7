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
	return c.upgrade(ctx, "/api/v1/jobs/"+url.PathEscape(id)+"/ssh", api.SSHProtocol, "agent ssh "+id, map[string]string{
		api.HeaderSSHAuthorizedKey: strings.TrimSpace(authorizedKey),
		api.HeaderSSHUser:          user,
	})
}

// upgrade asks the agent for path upgraded to protocol and returns the
// stream; what names the call in errors. The agent's refusal comes back
// as an *Error with its status and message.
func (c *Client) upgrade(ctx context.Context, path, protocol, what string, headers map[string]string) (io.ReadWriteCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", protocol)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
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
		return nil, fmt.Errorf("%s: the transport cannot carry an upgraded stream", what)
	}
	return rwc, nil
}

func decodeError(b []byte, e *api.AgentError) error { return json.Unmarshal(b, e) }
