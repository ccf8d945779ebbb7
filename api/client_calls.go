package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// This file holds one method per endpoint of the server API (see the table
// in server.go). Every method takes the project first where the endpoint is
// project-scoped and returns the server's answer or a *ServerError.

// Health calls GET /api/v1/healthz, which needs no token.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	return h, c.get(ctx, "/api/v1/healthz", &h)
}

// WhoAmI returns the user the token belongs to.
func (c *Client) WhoAmI(ctx context.Context) (User, error) {
	var u User
	return u, c.get(ctx, "/api/v1/whoami", &u)
}

// ListUsers returns every user (admins only).
func (c *Client) ListUsers(ctx context.Context) ([]User, error) {
	var us []User
	return us, c.get(ctx, "/api/v1/users", &us)
}

// CreateUser creates a user and returns its first token, shown only once.
func (c *Client) CreateUser(ctx context.Context, req CreateUserRequest) (UserToken, error) {
	var ut UserToken
	return ut, c.post(ctx, "/api/v1/users", req, &ut)
}

// DeleteUser removes a user and its tokens.
func (c *Client) DeleteUser(ctx context.Context, name string) error {
	return c.del(ctx, "/api/v1/users/"+url.PathEscape(name), nil)
}

// RotateToken issues a new token for the user; the old one stops working.
func (c *Client) RotateToken(ctx context.Context, user string) (UserToken, error) {
	var ut UserToken
	return ut, c.post(ctx, "/api/v1/users/"+url.PathEscape(user)+"/token", nil, &ut)
}

// ListProjects returns the caller's projects (every project for admins).
func (c *Client) ListProjects(ctx context.Context) ([]Project, error) {
	var ps []Project
	return ps, c.get(ctx, "/api/v1/projects", &ps)
}

// CreateProject creates a project with the caller as its admin.
func (c *Client) CreateProject(ctx context.Context, name string) (Project, error) {
	var p Project
	return p, c.post(ctx, "/api/v1/projects", CreateProjectRequest{Name: name}, &p)
}

// SetMember adds user to project with role, or changes their role.
func (c *Client) SetMember(ctx context.Context, project, user, role string) (Member, error) {
	var m Member
	return m, c.put(ctx, projectPath(project, "/members/"+url.PathEscape(user)), SetMemberRequest{Role: role}, &m)
}

// PlanRun previews a run: the offers it would get and whether it replaces
// an active run. Nothing is stored.
func (c *Client) PlanRun(ctx context.Context, project string, req ApplyRunRequest) (RunPlan, error) {
	var p RunPlan
	return p, c.call(ctx, http.MethodPost, projectPath(project, "/runs/plan"), req, &p, true)
}

// ApplyRun submits a run. It is sent once (a retry could submit twice).
func (c *Client) ApplyRun(ctx context.Context, project string, req ApplyRunRequest) (Run, error) {
	var r Run
	return r, c.post(ctx, projectPath(project, "/runs/apply"), req, &r)
}

// ListRuns returns the project's active runs, and finished ones with all.
func (c *Client) ListRuns(ctx context.Context, project string, all bool) ([]Run, error) {
	path := projectPath(project, "/runs")
	if all {
		path += "?all=true"
	}
	var rs []Run
	return rs, c.get(ctx, path, &rs)
}

// GetRun returns one run with its jobs.
func (c *Client) GetRun(ctx context.Context, project, run string) (Run, error) {
	var r Run
	return r, c.get(ctx, projectPath(project, "/runs/"+url.PathEscape(run)), &r)
}

// StopRun asks the server to stop a run (abort: without the grace
// period). Stopping is idempotent, so the call is retried.
func (c *Client) StopRun(ctx context.Context, project, run string, abort bool) (Run, error) {
	var r Run
	return r, c.call(ctx, http.MethodPost, projectPath(project, "/runs/"+url.PathEscape(run)+"/stop"), StopRunRequest{Abort: abort}, &r, true)
}

// DeleteRun removes a finished run and its logs.
func (c *Client) DeleteRun(ctx context.Context, project, run string) error {
	return c.del(ctx, projectPath(project, "/runs/"+url.PathEscape(run)), nil)
}

// LogOptions select the part of a run's output to read.
type LogOptions struct {
	// Follow keeps the stream open until every job of the run finished.
	Follow bool
	// Job limits the output to one job id; empty means every job.
	Job string
	// Attempt reads one attempt of the run, counted from 1 (a retry is a
	// new attempt with new jobs; earlier attempts' output is kept); 0
	// means the latest.
	Attempt int
}

// RunLogs calls each with every line of the run's output, in the order
// each job wrote them. A line longer than MaxLogLine arrives as pieces
// with Partial set on all but the last; a marker entry (Dropped set)
// stands for output the server no longer has. With Follow it returns once
// the run's jobs finished and their output was delivered; if the
// connection breaks meanwhile (a server restart), it reconnects with the
// client's backoff and skips the lines it already delivered, so each line
// is delivered once.
func (c *Client) RunLogs(ctx context.Context, project, run string, opts LogOptions, each func(LogEntry) error) error {
	delivered := map[string]int64{} // job -> offset of its last delivered line
	seen := map[string]bool{}
	emit := func(e LogEntry) error {
		if seen[e.Job] && e.Offset <= delivered[e.Job] {
			return nil
		}
		seen[e.Job], delivered[e.Job] = true, e.Offset
		return each(e)
	}
	var lastErr error
	for try := 0; ; try++ {
		q := url.Values{}
		if opts.Follow {
			q.Set("follow", "true")
		}
		if opts.Attempt > 0 {
			q.Set("attempt", strconv.Itoa(opts.Attempt))
		}
		if opts.Job != "" {
			q.Set("job", opts.Job)
			if seen[opts.Job] {
				// An entry's offset is where the next one starts.
				q.Set("offset", strconv.FormatInt(delivered[opts.Job], 10))
			}
		}
		path := projectPath(project, "/runs/"+url.PathEscape(run)+"/logs")
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		err := stream(ctx, c, path, emit)
		var te *transportError
		if err == nil || !opts.Follow || ctx.Err() != nil || !(errors.As(err, &te) || errors.Is(err, io.ErrUnexpectedEOF)) {
			return err
		}
		if lastErr = err; try >= c.retry.Attempts {
			return lastErr
		}
		if !c.retry.Sleep(ctx, try+1) {
			return errors.Join(lastErr, ctx.Err())
		}
	}
}

// RunEvents returns the recorded transitions of a run and its jobs, after
// the event id after (empty: from the start).
func (c *Client) RunEvents(ctx context.Context, project, run, after string) ([]Event, error) {
	path := projectPath(project, "/runs/"+url.PathEscape(run)+"/events")
	if after != "" {
		path += "?after=" + url.QueryEscape(after)
	}
	var es []Event
	return es, c.get(ctx, path, &es)
}

// Events returns the project's events after the id after, at most limit
// (0: the server's default).
func (c *Client) Events(ctx context.Context, project, after string, limit int) ([]Event, error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := projectPath(project, "/events")
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var es []Event
	return es, c.get(ctx, path, &es)
}

// ApplyFleet creates or updates a fleet from its configuration.
func (c *Client) ApplyFleet(ctx context.Context, project string, req ApplyRequest) (Fleet, error) {
	var f Fleet
	return f, c.call(ctx, http.MethodPost, projectPath(project, "/fleets/apply"), req, &f, true)
}

// ListFleets returns the project's fleets and the shared ones.
func (c *Client) ListFleets(ctx context.Context, project string) ([]Fleet, error) {
	var fs []Fleet
	return fs, c.get(ctx, projectPath(project, "/fleets"), &fs)
}

// GetFleet returns one fleet as the project sees it.
func (c *Client) GetFleet(ctx context.Context, project, fleet string) (Fleet, error) {
	var f Fleet
	return f, c.get(ctx, projectPath(project, "/fleets/"+url.PathEscape(fleet)), &f)
}

// DeleteFleet removes a fleet of the project.
func (c *Client) DeleteFleet(ctx context.Context, project, fleet string) error {
	return c.del(ctx, projectPath(project, "/fleets/"+url.PathEscape(fleet)), nil)
}

// IssueRegistrationToken creates a token with which `gpud agent --server`
// hosts join fleet; its Token is returned only here.
func (c *Client) IssueRegistrationToken(ctx context.Context, project, fleet string) (RegistrationToken, error) {
	var t RegistrationToken
	return t, c.post(ctx, projectPath(project, "/fleets/"+url.PathEscape(fleet)+"/tokens"), nil, &t)
}

// RevokeRegistrationToken revokes a fleet's registration token and
// disconnects the hosts registered with it.
func (c *Client) RevokeRegistrationToken(ctx context.Context, project, fleet, id string) error {
	return c.del(ctx, projectPath(project, "/fleets/"+url.PathEscape(fleet)+"/tokens/"+url.PathEscape(id)), nil)
}

// ListInstances returns the hosts the project's runs can be placed on.
func (c *Client) ListInstances(ctx context.Context, project string) ([]Instance, error) {
	var is []Instance
	return is, c.get(ctx, projectPath(project, "/instances"), &is)
}

// OfferQuery filters offers by resources, in the configuration grammar
// ("H100:2", "4..", "16GB.."); empty fields do not filter.
type OfferQuery struct {
	GPU, CPU, Memory string
}

// Offers returns the idle capacity matching q, best first.
func (c *Client) Offers(ctx context.Context, project string, q OfferQuery) ([]Offer, error) {
	v := url.Values{}
	for k, s := range map[string]string{"gpu": q.GPU, "cpu": q.CPU, "memory": q.Memory} {
		if s != "" {
			v.Set(k, s)
		}
	}
	path := projectPath(project, "/offers")
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var os []Offer
	return os, c.get(ctx, path, &os)
}

// ApplyQueue creates or updates a queue from its configuration.
func (c *Client) ApplyQueue(ctx context.Context, project string, req ApplyRequest) (Queue, error) {
	var q Queue
	return q, c.call(ctx, http.MethodPost, projectPath(project, "/queues/apply"), req, &q, true)
}

// ListQueues returns the project's queues with fair share, allocation and
// usage.
func (c *Client) ListQueues(ctx context.Context, project string) ([]Queue, error) {
	var qs []Queue
	return qs, c.get(ctx, projectPath(project, "/queues"), &qs)
}

// DeleteQueue removes a queue no run uses.
func (c *Client) DeleteQueue(ctx context.Context, project, queue string) error {
	return c.del(ctx, projectPath(project, "/queues/"+url.PathEscape(queue)), nil)
}

// ApplyConfig applies a volume or gateway configuration at
// /projects/{p}/{volumes|gateways}/apply and returns the server's answer as
// JSON; kinds the server does not manage answer 404 or 405.
func (c *Client) ApplyConfig(ctx context.Context, project string, kind Kind, req ApplyRequest) (json.RawMessage, error) {
	var out json.RawMessage
	return out, c.call(ctx, http.MethodPost, projectPath(project, "/"+string(kind)+"s/apply"), req, &out, true)
}

// ListSecrets returns the project's secret names, without values.
func (c *Client) ListSecrets(ctx context.Context, project string) ([]Secret, error) {
	var ss []Secret
	return ss, c.get(ctx, projectPath(project, "/secrets"), &ss)
}

// GetSecret returns a secret with its value (managers only).
func (c *Client) GetSecret(ctx context.Context, project, name string) (Secret, error) {
	var s Secret
	return s, c.get(ctx, projectPath(project, "/secrets/"+url.PathEscape(name)), &s)
}

// SetSecret creates or replaces a secret's value.
func (c *Client) SetSecret(ctx context.Context, project, name, value string) (Secret, error) {
	var s Secret
	return s, c.put(ctx, projectPath(project, "/secrets/"+url.PathEscape(name)), SetSecretRequest{Value: value}, &s)
}

// DeleteSecret removes a secret.
func (c *Client) DeleteSecret(ctx context.Context, project, name string) error {
	return c.del(ctx, projectPath(project, "/secrets/"+url.PathEscape(name)), nil)
}
