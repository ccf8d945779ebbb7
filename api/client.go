package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// IsStatus reports whether err is a *ServerError with the HTTP status code.
func IsStatus(err error, status int) bool {
	var e *ServerError
	return errors.As(err, &e) && e.Status == status
}

// maxErrorBody bounds how much of an error answer the client reads.
const maxErrorBody = 1 << 20

// Client is the Go HTTP client of the server API (under /api/v1). It is
// the one client every gpud command and test uses; it is safe for
// concurrent use.
type Client struct {
	base  string // "http://host:port", without a trailing slash
	token string
	http  *http.Client
	retry Backoff
}

// NewClient returns a client of the server at baseURL that sends token as a
// bearer token. hc may be nil (http.DefaultClient's transport is used,
// without a global timeout so log streams can stay open).
func NewClient(baseURL, token string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: use http://host:port or https://host", baseURL)
	}
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, http: hc, retry: DefaultBackoff()}, nil
}

// BaseURL returns the server URL the client talks to.
func (c *Client) BaseURL() string { return c.base }

// Backoff is gpud's one exponential backoff: wait First before the first
// retry, then double up to Max. The API client retries an idempotent call
// with it when the server cannot be reached or answers 502, 503 or 504 (up
// to Attempts tries); agents and the server pace their reconnect loops with
// Sleep (Attempts unused).
type Backoff struct {
	Attempts int
	First    time.Duration
	Max      time.Duration
}

// DefaultBackoff is four tries over about 1.5 s: enough to ride out a
// server restart's listen gap, short enough for an interactive command.
func DefaultBackoff() Backoff {
	return Backoff{Attempts: 4, First: 100 * time.Millisecond, Max: time.Second}
}

// Delay is the wait before retry n (1 for the first retry): First doubled
// n-1 times, at most Max.
func (b Backoff) Delay(n int) time.Duration {
	d := b.First
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	if b.Max > 0 && d > b.Max {
		d = b.Max
	}
	return d
}

// Sleep waits Delay(n), or until ctx ends; it reports whether the full
// wait passed.
func (b Backoff) Sleep(ctx context.Context, n int) bool {
	t := time.NewTimer(b.Delay(n))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Retry calls fn until it returns nil, a non-retryable error, or the tries
// run out; it stops early when ctx ends. It returns fn's last error.
func (b Backoff) Retry(ctx context.Context, fn func() error) error {
	for try := 1; ; try++ {
		err := fn()
		if err == nil || !retryable(err) || try >= b.Attempts {
			return err
		}
		if !b.Sleep(ctx, try) {
			return errors.Join(err, ctx.Err())
		}
	}
}

// retryable reports whether an error may go away on its own: the server
// is unreachable or a proxy in front of it is.
func retryable(err error) bool {
	var ae *ServerError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusBadGateway || ae.Status == http.StatusServiceUnavailable || ae.Status == http.StatusGatewayTimeout
	}
	var ne *transportError
	return errors.As(err, &ne)
}

// transportError marks a failure to get any answer from the server.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }
func (e *transportError) Unwrap() error { return e.err }

// call sends one request and decodes a JSON answer into out (unless nil).
// Idempotent calls (GET, and PUT/DELETE by the API's design) are retried
// with the client's backoff; POSTs are sent once unless idempotent is set.
func (c *Client) call(ctx context.Context, method, path string, body, out any, idempotent bool) error {
	send := func() error {
		resp, err := c.send(ctx, method, path, body, "application/json")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if out == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			return nil
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
		}
		return nil
	}
	if !idempotent {
		return send()
	}
	return c.retry.Retry(ctx, send)
}

// get, put, post and del are call for each method; GET, PUT and DELETE are
// idempotent in the server API, POST is not unless the endpoint says so.
func (c *Client) get(ctx context.Context, path string, out any) error {
	return c.call(ctx, http.MethodGet, path, nil, out, true)
}

func (c *Client) post(ctx context.Context, path string, body, out any) error {
	return c.call(ctx, http.MethodPost, path, body, out, false)
}

func (c *Client) put(ctx context.Context, path string, body, out any) error {
	return c.call(ctx, http.MethodPut, path, body, out, true)
}

func (c *Client) del(ctx context.Context, path string, out any) error {
	return c.call(ctx, http.MethodDelete, path, nil, out, true)
}

// send performs the request and turns non-2xx answers into *ServerError. The
// caller closes the body of a successful answer.
func (c *Client) send(ctx context.Context, method, path string, body any, accept string) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode the request: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, ctx.Err())
		}
		return nil, &transportError{fmt.Errorf("server %s is unreachable: %w", c.base, err)}
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, decodeError(resp)
}

// decodeError reads an error answer. A body that is not the API's error
// shape (a proxy's HTML page, say) still yields a *ServerError with the
// status and the start of the body as the message.
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &ServerError{Status: resp.StatusCode}
	if json.Unmarshal(b, e) != nil || e.Message == "" {
		e.Field, e.Errors = "", nil
		e.Code = "http_" + strconv.Itoa(resp.StatusCode)
		e.Message = strings.TrimSpace(string(b))
		if len(e.Message) > 200 {
			e.Message = e.Message[:200] + "…"
		}
		if e.Message == "" {
			e.Message = http.StatusText(resp.StatusCode)
		}
	}
	e.Status = resp.StatusCode
	return e
}

// stream opens a newline-delimited JSON answer and calls each with every
// decoded line, until the server ends the stream, ctx ends, or each returns
// an error (which stream returns). Opening is retried like any GET.
func stream[T any](ctx context.Context, c *Client, path string, each func(T) error) error {
	var resp *http.Response
	err := c.retry.Retry(ctx, func() error {
		var err error
		resp, err = c.send(ctx, http.MethodGet, path, nil, "application/x-ndjson")
		return err
	})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Records are read whole up to MaxLogRecord (a log entry carrying a
	// MaxLogLine line), never cut by a reader's buffer.
	var eachErr error
	err = ReadLines(resp.Body, MaxLogRecord, func(line []byte) error {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			return nil // keep-alive
		}
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			eachErr = fmt.Errorf("GET %s: decode a streamed line: %w", path, err)
			return eachErr
		}
		if err := each(v); err != nil {
			eachErr = err
			return err
		}
		return nil
	})
	if err != nil && eachErr == nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("GET %s: stream: %w", path, err)
	}
	return err
}

// projectPath builds /api/v1/projects/{p}/rest with p escaped.
func projectPath(project, rest string) string {
	return "/api/v1/projects/" + url.PathEscape(project) + rest
}
