package api

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// SetSSHKey registers user's public key (an authorized_keys line) for SSH
// into runs; it replaces the previous one.
func (c *Client) SetSSHKey(ctx context.Context, user, publicKey string) (SSHKey, error) {
	var out SSHKey
	return out, c.put(ctx, "/api/v1/users/"+url.PathEscape(user)+"/ssh-key", SSHKey{PublicKey: publicKey}, &out)
}

// DialRunSSH opens the byte stream that carries SSH to run's job (job ""
// picks its first running job): a connection of its own to the server,
// upgraded to SSHProtocol over HTTP/1.1, never HTTP/2, which has no
// Upgrade. The caller speaks SSH on it and closes it.
func (c *Client) DialRunSSH(ctx context.Context, project, run, job string) (net.Conn, error) {
	u, err := url.Parse(c.base)
	if err != nil {
		return nil, err
	}
	path := "/api/v1/projects/" + url.PathEscape(project) + "/runs/" + url.PathEscape(run) + "/ssh"
	if job != "" {
		path += "?job=" + url.QueryEscape(job)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[string]string{"https": "443", "http": "80"}[u.Scheme])
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var conn net.Conn
	if u.Scheme == "https" {
		tcfg := &tls.Config{}
		if tr, ok := c.http.Transport.(*http.Transport); ok && tr.TLSClientConfig != nil {
			tcfg = tr.TLSClientConfig.Clone()
		}
		tcfg.NextProtos = []string{"http/1.1"}
		conn, err = (&tls.Dialer{Config: tcfg}).DialContext(dctx, "tcp", host)
	} else {
		conn, err = (&net.Dialer{}).DialContext(dctx, "tcp", host)
	}
	if err != nil {
		return nil, &transportError{fmt.Errorf("server %s is unreachable: %w", c.base, err)}
	}
	stop := context.AfterFunc(dctx, func() { conn.Close() })
	defer stop()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", SSHProtocol)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("ssh %s: %w", run, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("ssh %s: %w", run, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		return nil, decodeError(resp)
	}
	if !stop() {
		conn.Close()
		return nil, fmt.Errorf("ssh %s: %w", run, dctx.Err())
	}
	return &upgradedConn{Conn: conn, r: br}, nil
}

// upgradedConn reads what was buffered with the upgrade's answer first.
type upgradedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *upgradedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite ends the stream's sending half (TCP and TLS can), so the far
// end reads EOF while the answer still arrives.
func (c *upgradedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
