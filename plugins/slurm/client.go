package slurm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// client speaks to slurmrestd: each request carries the user's name and
// JWT; answers are JSON with an "errors" list that says what Slurm
// refused even when the status is 200.
type client struct {
	base, version string
	user, token   string
	http          *http.Client
}

func newClient(c Config) *client {
	return &client{
		base: c.URL, version: c.APIVersion, user: c.User, token: c.Token,
		http: &http.Client{Timeout: time.Duration(c.TimeoutSeconds) * time.Second},
	}
}

// slurmError is one entry of an answer's "errors".
type slurmError struct {
	Error       string `json:"error"`
	ErrorNumber int    `json:"error_number"`
	Description string `json:"description"`
	Source      string `json:"source"`
}

// meta is the "meta" of every answer: which plugin and Slurm served it.
type meta struct {
	Plugin struct {
		Type string `json:"type"`
	} `json:"plugin"`
	Slurm struct {
		Release string `json:"release"`
	} `json:"Slurm"`
}

type answer struct {
	Meta   meta         `json:"meta"`
	Errors []slurmError `json:"errors"`
}

// apiError is a request slurmrestd answered with an error.
type apiError struct {
	Method, Path string
	Status       int
	Errors       []slurmError
	Body         string
}

func (e *apiError) Error() string {
	var parts []string
	for _, x := range e.Errors {
		s := strings.TrimSpace(x.Description)
		if x.Error != "" && x.Error != "Unspecified error" {
			s = strings.TrimSpace(s + " (" + x.Error + ")")
		}
		if x.Source != "" {
			s = x.Source + ": " + s
		}
		parts = append(parts, s)
	}
	msg := strings.Join(parts, "; ")
	if msg == "" {
		msg = strings.TrimSpace(e.Body)
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
	}
	return fmt.Sprintf("slurmrestd %s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), msg)
}

// errorNumber reports whether err is an answer carrying Slurm error n.
func errorNumber(err error, n int) bool {
	var ae *apiError
	if !errors.As(err, &ae) {
		return false
	}
	for _, x := range ae.Errors {
		if x.ErrorNumber == n {
			return true
		}
	}
	return false
}

// Slurm's error numbers the backend tells apart.
const (
	errInvalidJobID      = 2017 // ESLURM_INVALID_JOB_ID
	errAlreadyDone       = 2021 // ESLURM_ALREADY_DONE
	errInvalidPartition  = 2000 // ESLURM_INVALID_PARTITION_NAME
	errAccessDenied      = 2002 // ESLURM_ACCESS_DENIED
	errUserIDMissing     = 2010 // ESLURM_USER_ID_MISSING
	errInvalidAccount    = 2045 // ESLURM_INVALID_ACCOUNT
	errTransitionStateNo = 2008 // ESLURM_TRANSITION_STATE_NO_UPDATE
)

// path is an endpoint of the configured API version: "jobs" ->
// /slurm/v0.0.38/jobs.
func (c *client) path(p string) string { return "/slurm/" + c.version + "/" + p }

// do sends one request and decodes the answer into out (which should
// embed answer); a non-2xx status or a non-empty "errors" is an error.
func (c *client) do(ctx context.Context, method, p string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+p, rd)
	if err != nil {
		return err
	}
	req.Header.Set("X-SLURM-USER-NAME", c.user)
	req.Header.Set("X-SLURM-USER-TOKEN", c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("slurmrestd %s %s: %w", method, p, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("slurmrestd %s %s: read the answer: %w", method, p, err)
	}
	var a answer
	jerr := json.Unmarshal(raw, &a)
	if resp.StatusCode/100 != 2 || len(a.Errors) > 0 {
		return &apiError{Method: method, Path: p, Status: resp.StatusCode, Errors: a.Errors, Body: string(raw)}
	}
	if jerr != nil {
		return fmt.Errorf("slurmrestd %s %s: %d, not JSON: %w", method, p, resp.StatusCode, jerr)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("slurmrestd %s %s: decode: %w", method, p, err)
		}
	}
	return nil
}
