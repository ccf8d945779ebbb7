// Package client is the Go client of the agent HTTP API, used by the
// server to drive agents and by tests. It speaks to "http://host:port",
// "https://…" or "unix:///path/to.sock".
//
// client must not import daemon, store, sched, plugins, proxy, nor the
// agent package (only api).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"gpud.dev/gpud/api"
)

// Client calls one agent. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// Error is an error response from the agent.
type Error struct {
	Status  int
	Message string
	// Job is set when a start failed after the job was recorded.
	Job *api.JobStatus
}

func (e *Error) Error() string { return fmt.Sprintf("agent: %d: %s", e.Status, e.Message) }

// IsNotFound reports whether err is the agent saying "no such job".
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// New returns a client for addr with the bearer token. hc may be nil; for
// unix sockets a transport dialing the socket is built.
func New(addr, token string, hc *http.Client) (*Client, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		return &Client{base: "http://agent", token: token, http: &http.Client{Transport: tr}}, nil
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("agent address %q: use http://host:port or unix:///path", addr)
	}
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimSuffix(addr, "/"), token: token, http: hc}, nil
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("agent %s %s: decode: %w", method, path, err)
	}
	return nil
}

// send performs the request and turns non-2xx answers into *Error.
func (c *Client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	var e struct {
		api.AgentError
		Job *api.JobStatus `json:"job"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(b))
	}
	return nil, &Error{Status: resp.StatusCode, Message: e.Error, Job: e.Job}
}

// Host returns the agent's host info.
func (c *Client) Host(ctx context.Context) (api.HostInfo, error) {
	var h api.HostInfo
	return h, c.do(ctx, http.MethodGet, "/api/v1/host", nil, &h)
}

// Start starts a job and returns once it runs (or failed to start).
func (c *Client) Start(ctx context.Context, spec api.JobSpec) (api.JobStatus, error) {
	var st api.JobStatus
	return st, c.do(ctx, http.MethodPost, "/api/v1/jobs", spec, &st)
}

// List returns every job on the agent.
func (c *Client) List(ctx context.Context) ([]api.JobStatus, error) {
	var out []api.JobStatus
	return out, c.do(ctx, http.MethodGet, "/api/v1/jobs", nil, &out)
}

// Get returns one job's status.
func (c *Client) Get(ctx context.Context, id string) (api.JobStatus, error) {
	var st api.JobStatus
	return st, c.do(ctx, http.MethodGet, "/api/v1/jobs/"+url.PathEscape(id), nil, &st)
}

// Stop asks the job to stop and returns its terminating status.
func (c *Client) Stop(ctx context.Context, id string) (api.JobStatus, error) {
	var st api.JobStatus
	return st, c.do(ctx, http.MethodPost, "/api/v1/jobs/"+url.PathEscape(id)+"/stop", nil, &st)
}

// Wait blocks until the job is final or ctx ends.
func (c *Client) Wait(ctx context.Context, id string) (api.JobStatus, error) {
	for {
		var st api.JobStatus
		if err := c.do(ctx, http.MethodGet, "/api/v1/jobs/"+url.PathEscape(id)+"/wait?timeout=60s", nil, &st); err != nil {
			return st, err
		}
		if st.State.Finished() {
			return st, nil
		}
	}
}

// Remove deletes a finished job and its logs.
func (c *Client) Remove(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/jobs/"+url.PathEscape(id), nil, nil)
}

// Metrics samples the job's resource use.
func (c *Client) Metrics(ctx context.Context, id string) (api.JobMetrics, error) {
	var m api.JobMetrics
	return m, c.do(ctx, http.MethodGet, "/api/v1/jobs/"+url.PathEscape(id)+"/metrics", nil, &m)
}

// LogOptions selects the output Logs returns.
type LogOptions struct {
	Follow bool
	Since  time.Time
	// Stream limits to one stream; "" means both.
	Stream api.LogStream
}

// Logs calls emit for each output line; with Follow it returns when the
// job has ended and all output was read. A line longer than
// api.MaxLogLine comes as pieces, all but the last with Partial set.
func (c *Client) Logs(ctx context.Context, id string, opts LogOptions, emit func(api.JobLogEntry) error) error {
	q := url.Values{}
	if opts.Follow {
		q.Set("follow", "true")
	}
	if !opts.Since.IsZero() {
		q.Set("since", opts.Since.Format(time.RFC3339Nano))
	}
	if opts.Stream != "" {
		q.Set("stdout", fmt.Sprint(opts.Stream == api.LogStdout))
		q.Set("stderr", fmt.Sprint(opts.Stream == api.LogStderr))
	}
	resp, err := c.send(ctx, http.MethodGet, "/api/v1/jobs/"+url.PathEscape(id)+"/logs?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Entries are read whole however long (up to api.MaxLogRecord, an
	// entry carrying an api.MaxLogLine line), never cut by a buffer.
	var emitErr error
	err = api.ReadLines(resp.Body, api.MaxLogRecord, func(line []byte) error {
		var e api.JobLogEntry
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("agent logs %s: %w", id, err)
		}
		if err := emit(e); err != nil {
			emitErr = err
			return err
		}
		return nil
	})
	if emitErr != nil {
		return emitErr
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("agent logs %s: %w", id, err)
	}
	return ctx.Err()
}
