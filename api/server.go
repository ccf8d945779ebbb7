package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Server API (gpud serve), version 1.
//
// Every path is under /api/v1 and speaks JSON (Content-Type
// application/json), except the log stream, which is newline-delimited
// JSON (application/x-ndjson). Every call but GET /api/v1/healthz needs
// "Authorization: Bearer <token>". Request bodies are decoded strictly:
// unknown fields, wrong types, trailing data and bodies over 1 MiB are
// refused and nothing is stored. Every error response is a ServerError:
// {"code", "message", "field"}.
//
// Roles: a user's global role is admin or user; within a project a member
// is admin, manager or user. A global admin may do everything everywhere.
// A member never grants, raises or removes a role above its own.
// Project-scoped calls by a non-member answer 404 project_not_found (so
// project names do not leak).
//
// Routes (routes.go) lists every endpoint with the access it requires, its
// request and its response; the server registers its handlers from that
// table and enforces each route's Access before the handler runs.
//
// Services without a gateway are reachable through the server at
// /proxy/services/{project}/{run}/ (same bearer token; the prefix is
// stripped before the request reaches a replica).
//
// Logs: GET .../logs answers 200 with Content-Type application/x-ndjson and
// one LogEntry per line, in the order each job wrote them, flushed as they
// come. attempt (counted from 1; default the latest) reads an earlier
// attempt of a retried run. offset (per job, from LogEntry.Offset) resumes a stream. With
// follow=true the response stays open until every job of the run is
// finished and its output delivered, then ends; the client reads the exit
// code from GET .../runs/{run}.
//
// Status codes: 400 bad_request / invalid_json / unknown_field /
// invalid_field / invalid_configuration, 401 unauthorized, 403 forbidden,
// 404 not_found / project_not_found, 405 method_not_allowed, 409 conflict,
// 413 body_too_large, 415 unsupported_media_type, 422 not_honoured, 500
// internal.

// Error codes of the server API (ServerError.Code).
const (
	CodeBadRequest           = "bad_request"
	CodeInvalidJSON          = "invalid_json"
	CodeUnknownField         = "unknown_field"
	CodeInvalidField         = "invalid_field"
	CodeInvalidConfiguration = "invalid_configuration"
	// CodeNotHonoured: the configuration is valid, but sets fields gpud
	// cannot honour on the hosts the run may use; Errors name each field.
	CodeNotHonoured      = "not_honoured"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeProjectNotFound  = "project_not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodeBodyTooLarge     = "body_too_large"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeInternal         = "internal"
)

// MaxRequestBody is the largest request body the server reads, in bytes.
const MaxRequestBody = 1 << 20

// Roles of users and project members.
const (
	RoleAdmin   = "admin"
	RoleManager = "manager"
	RoleUser    = "user"
)

// ServerError is the body of every error response of the server API, and
// the error the Go client returns for one.
type ServerError struct {
	// Status is the HTTP status; it is not part of the JSON body.
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field is the request field at fault ("configuration", "resources.gpu",
	// "value"); empty when the error is not about one field.
	Field string `json:"field,omitempty"`
	// Errors lists every configuration error when Code is
	// invalid_configuration, each formatted as file:line:col: path: message.
	Errors []string `json:"errors,omitempty"`
}

// Error formats the error as "code: message (field)".
func (e *ServerError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s (field %s)", e.Code, e.Message, e.Field)
	}
	return e.Code + ": " + e.Message
}

// Health is the answer of GET /api/v1/healthz.
type Health struct {
	Status  string `json:"status"` // "ok"
	Version string `json:"version,omitempty"`
}

// User is a user as the API shows it; tokens are never shown here.
type User struct {
	Name      string    `json:"name"`
	Role      string    `json:"global_role"` // admin or user
	CreatedAt time.Time `json:"created_at"`
}

// CreateUserRequest creates a user; Role defaults to user.
type CreateUserRequest struct {
	Name string `json:"name"`
	Role string `json:"global_role,omitempty"`
}

// UserToken carries a freshly created API token. It is shown once: the
// server keeps only its hash.
type UserToken struct {
	User  User   `json:"user"`
	Token string `json:"token"`
}

// Project is a namespace of runs, fleets, queues and secrets.
type Project struct {
	Name      string    `json:"name"`
	Owner     string    `json:"owner,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Role is the caller's role in the project ("" for a global admin who
	// is not a member).
	Role string `json:"role,omitempty"`
}

// CreateProjectRequest creates a project; the caller becomes its admin
// member.
type CreateProjectRequest struct {
	Name string `json:"name"`
}

// Member is a user's role in a project.
type Member struct {
	Project string `json:"project"`
	User    string `json:"user"`
	Role    string `json:"role"` // admin, manager or user
}

// SetMemberRequest adds a user to a project or changes their role.
type SetMemberRequest struct {
	Role string `json:"role"`
}

// ApplyRequest carries one configuration, either as the api spec JSON
// (Configuration, what Config.MarshalJSON writes) or as YAML text
// (ConfigurationYAML, with Filename for error positions). Exactly one must
// be set.
type ApplyRequest struct {
	Configuration     json.RawMessage `json:"configuration,omitempty"`
	ConfigurationYAML string          `json:"configuration_yaml,omitempty"`
	Filename          string          `json:"filename,omitempty"`
}

// ApplyRunRequest submits (apply) or previews (plan) a run. Env is the
// client's environment as far as the configuration refers to it: it
// resolves ${{ env.X }} and env entries given without a value. ${{
// secrets.X }} is resolved from the project's secrets at submission.
type ApplyRunRequest struct {
	ApplyRequest
	Env map[string]string `json:"env,omitempty"`
	// Name overrides the configuration's name; empty keeps it (or lets the
	// server pick one).
	Name string `json:"name,omitempty"`
	// Force replaces an active run of the same name (it is stopped first)
	// instead of answering 409.
	Force bool `json:"force,omitempty"`
	// Upload is the SHA-256 (hex) of the archive of the configuration's
	// repos and files, PUT to .../uploads/{sha256} of the same project
	// first; required when the configuration sets repos or files.
	Upload string `json:"upload,omitempty"`
}

// RunPlan is what a run would get if applied now.
type RunPlan struct {
	// Run is the run as it would be stored (status "pending").
	Run Run `json:"run"`
	// Offers are the idle capacity matching one job's resources, best first.
	Offers []Offer `json:"offers"`
	// Action is "create", or "replace" when an active run has the name
	// (apply with force replaces it), or "update" when that run is a
	// running service this configuration changes: apply without force
	// rolls it out replica by replica (docs/gateway.md).
	Action string `json:"action"`
	// Message says why the run cannot start now, if that is known; empty
	// when offers exist.
	Message string `json:"message,omitempty"`
	// Notes say what gpud will do differently from a dstack server (no
	// gateway, no instances created, ...), so nothing is a surprise.
	Notes []string `json:"notes,omitempty"`
}

// StopRunRequest stops a run. Abort skips the stop_duration grace (jobs
// are killed) and marks jobs aborted.
type StopRunRequest struct {
	Abort bool `json:"abort,omitempty"`
}

// Run is a submitted task, service or dev environment and its jobs.
type Run struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Project string `json:"project"`
	User    string `json:"user"`
	Type    Kind   `json:"type"`
	// Status is one of pending submitted provisioning running terminating
	// terminated failed done.
	Status string `json:"status"`
	// Reason says why the run has its status ("stopped by alice",
	// "job 0 exited with code 1", "retrying after no-capacity").
	Reason string `json:"reason,omitempty"`
	// WhyPending says why the run's jobs wait for capacity (the scheduler's
	// sentence); empty when they do not wait.
	WhyPending string `json:"why_pending,omitempty"`
	Queue      string `json:"queue"`
	Priority   int    `json:"priority"`
	// Configuration is the normalized configuration with ${{ }}
	// references as submitted (secrets are never echoed back).
	Configuration json.RawMessage `json:"configuration"`
	Jobs          []Job           `json:"jobs"`
	// ExitCode is the exit code of the run's first job once it ended.
	ExitCode *int `json:"exit_code,omitempty"`
	Attempt  int  `json:"attempt"` // retries so far
	// Cost is what the run's jobs have cost so far, every attempt, in
	// dollars: each job's price per hour times how long it ran (own hosts
	// cost nothing).
	Cost        float64   `json:"cost"`
	SubmittedAt time.Time `json:"submitted_at"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	FinishedAt  time.Time `json:"finished_at,omitzero"`
	// ServiceURL is where a service's replicas are reached through the
	// server ("/proxy/services/{project}/{run}/").
	ServiceURL string `json:"service_url,omitempty"`
	// IDELink opens a dev environment with ide: set in the IDE once
	// `gpud ssh-config RUN` wrote the SSH entry (IDELink).
	IDELink string `json:"ide_link,omitempty"`
}

// Finished reports whether the run reached a final status.
func (r *Run) Finished() bool {
	switch r.Status {
	case "terminated", "failed", "done":
		return true
	}
	return false
}

// Job is one node of a task or one replica of a service.
type Job struct {
	ID         string `json:"id"`
	Name       string `json:"name"` // run name, "-<replica>-<node>"
	ReplicaNum int    `json:"replica_num"`
	NodeRank   int    `json:"node_rank"`
	// Group is the task group's or service replica group's name, if any.
	Group string `json:"group,omitempty"`
	// Status is one of submitted provisioning pulling running terminating
	// terminated aborted failed done.
	Status     string `json:"status"`
	Reason     string `json:"reason,omitempty"`
	WhyPending string `json:"why_pending,omitempty"`
	Instance   string `json:"instance,omitempty"`
	// GPUs are the device indices on Instance.
	GPUs []int `json:"gpus,omitempty"`
	// Price is the job's share of its placement's price per hour (0 on
	// own hosts), and Cost what it has cost so far.
	Price       float64    `json:"price,omitempty"`
	Cost        float64    `json:"cost,omitempty"`
	ExitCode    *int       `json:"exit_code,omitempty"`
	Ports       []JobPort  `json:"ports,omitempty"`
	SubmittedAt time.Time  `json:"submitted_at"`
	StartedAt   time.Time  `json:"started_at,omitzero"`
	FinishedAt  time.Time  `json:"finished_at,omitzero"`
	Resources   JobRequest `json:"resources"`
	// Ready is set for a running service replica: whether it takes
	// requests (it passed its probes and is not being replaced).
	Ready *bool `json:"ready,omitempty"`
}

// JobRequest is what one job was scheduled with.
type JobRequest struct {
	GPU     float64 `json:"gpu"` // devices; under 1 is a fraction of one
	GPUName string  `json:"gpu_name,omitempty"`
	// GPUMemory and GPUMemoryMax bound each device's memory (0: no bound).
	GPUMemory    Size    `json:"gpu_memory,omitempty"`
	GPUMemoryMax Size    `json:"gpu_memory_max,omitempty"`
	CPU          float64 `json:"cpu"` // cores
	Memory       Size    `json:"memory"`
}

// LogEntry is one line of a run's output in the logs stream. A line of up
// to MaxLogLine bytes comes whole; a longer one comes as pieces, each but
// the last with Partial set (see MaxLogLine). Offset is the byte offset in
// the job's stored log after this entry: passed as ?offset= (with ?job=)
// the stream resumes with the next entry, neither repeating nor skipping
// one.
type LogEntry struct {
	Job    string    `json:"job"`
	Offset int64     `json:"offset"` // pass as ?offset= to resume after this line
	Time   time.Time `json:"time"`
	Stream LogStream `json:"stream"`
	Line   string    `json:"line"`
	// Partial marks a piece of a line longer than MaxLogLine: the next
	// entry of the same job and stream continues it, with no newline in
	// between.
	Partial bool `json:"partial,omitempty"`
	// Dropped is set on a marker entry that stands for output the server
	// does not have: this many bytes of the job's stored log (older output
	// beyond the job's log limit, or one line larger than the limit).
	// Line says so in words; Stream is the stream it belongs to, stderr
	// when unknown.
	Dropped int64 `json:"dropped,omitempty"`
}

// Event is one recorded transition, with its reason.
type Event struct {
	ID      string    `json:"id"` // sorts by time; pass as ?after= to page
	Time    time.Time `json:"time"`
	Project string    `json:"project,omitempty"`
	Kind    string    `json:"kind"` // runs, jobs, instances, queues, ...
	Subject string    `json:"subject"`
	// Name is the subject as the project knows it: a run's name, a job's
	// ("train-0-1"); empty when the subject has none (or is gone).
	Name   string `json:"name,omitempty"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// Fleet is a set of instances runs are placed on.
type Fleet struct {
	Name    string `json:"name"`
	Project string `json:"project,omitempty"` // empty for a shared fleet (the local one)
	Status  string `json:"status"`
	// Configuration is the fleet's normalized configuration (nil for the
	// built-in local fleet).
	Configuration json.RawMessage `json:"configuration,omitempty"`
	Instances     []Instance      `json:"instances"`
	CreatedAt     time.Time       `json:"created_at"`
	// Backends and Nodes describe a backend fleet (api/fleet_backend.go):
	// the backends its capacity comes from and the nodes its runs hold.
	Backends []FleetBackend `json:"backends,omitempty"`
	Nodes    *FleetNodesUse `json:"nodes,omitempty"`
}

// RegistrationToken is a fleet's token for bare-metal registration
// (`gpud agent --server URL --token T`). Token is set only in the answer
// that issued it; the server keeps its hash.
type RegistrationToken struct {
	ID    string `json:"id"`
	Fleet string `json:"fleet"`
	Token string `json:"token,omitempty"`
}

// Instance is one host runs are placed on.
type Instance struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Fleet    string `json:"fleet"`
	Backend  string `json:"backend"` // local, ssh, ...
	Status   string `json:"status"`  // pending provisioning idle busy terminating terminated
	Reason   string `json:"reason,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	Runtime  string `json:"runtime,omitempty"` // docker or process
	// Resources is what the host has; Free what no job holds now.
	Resources     InstanceResources `json:"resources"`
	Free          InstanceResources `json:"free"`
	LastHeartbeat time.Time         `json:"last_heartbeat,omitzero"`
	// Price is what the host costs per hour and InstanceType what it is,
	// for a machine gpud provisioned (an autoscaled fleet's); 0 and empty
	// for hosts gpud did not make.
	Price        float64 `json:"price,omitempty"`
	InstanceType string  `json:"instance_type,omitempty"`
}

// InstanceResources is an amount of a host's capacity.
type InstanceResources struct {
	GPUs      float64 `json:"gpus"`
	GPUName   string  `json:"gpu_name,omitempty"`
	GPUMemory Size    `json:"gpu_memory,omitempty"`
	CPUs      float64 `json:"cpus"`
	Memory    Size    `json:"memory"`
	Disk      Size    `json:"disk,omitempty"`
}

// Offer is capacity a run could get now.
type Offer struct {
	Backend   string            `json:"backend"`
	Fleet     string            `json:"fleet"`
	Instance  string            `json:"instance"`
	Resources InstanceResources `json:"resources"`
	Price     float64           `json:"price"` // per hour; 0 for own hosts
	Available string            `json:"availability"`
	// Owned marks a host of the project's or a shared fleet: it has no
	// price (a backend's offer carries the backend's price).
	Owned bool `json:"owned,omitempty"`
	// Region and Spot describe a backend's offer (empty for own hosts).
	Region string `json:"region,omitempty"`
	Spot   bool   `json:"spot,omitempty"`
}

// Queue is a scheduling queue with what the scheduler gave it.
type Queue struct {
	Name     string `json:"name"`
	Project  string `json:"project"`
	Parent   string `json:"parent,omitempty"`
	Priority int    `json:"priority"`
	// Configuration is the normalized queue configuration (nil for the
	// built-in default queue).
	Configuration json.RawMessage `json:"configuration,omitempty"`
	Quota         QueueAmounts    `json:"quota"`
	// Limit is nil per resource without a cap (JSON: -1).
	Limit QueueAmounts `json:"limit"`
	// FairShare is what the queue deserves now (quota plus its share of
	// unused capacity); Allocated what its running jobs hold; Usage its
	// decayed historical use in resource-hours.
	FairShare QueueAmounts `json:"fair_share"`
	Allocated QueueAmounts `json:"allocated"`
	Usage     QueueAmounts `json:"usage"`
	Pending   int          `json:"pending_jobs"`
	Running   int          `json:"running_jobs"`
}

// QueueAmounts is an amount of each resource: GPUs and CPU cores as
// numbers, memory in bytes; -1 means unlimited.
type QueueAmounts struct {
	GPU    float64 `json:"gpu"`
	CPU    float64 `json:"cpu"`
	Memory float64 `json:"memory"`
}

// Secret is a project secret; Value is set only by GET of one secret.
type Secret struct {
	Name      string    `json:"name"`
	Value     *string   `json:"value,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SetSecretRequest creates or replaces a secret's value.
type SetSecretRequest struct {
	Value string `json:"value"`
}

// Heartbeat is what an agent (or the server's link to one) reports: the
// host and every job it has. Instance names the host; the first heartbeat
// of a name registers it in Fleet (default "local").
type Heartbeat struct {
	Instance string      `json:"instance"`
	Fleet    string      `json:"fleet,omitempty"`
	Host     HostInfo    `json:"host"`
	Jobs     []JobStatus `json:"jobs,omitempty"`
}

// HeartbeatResponse tells the agent which jobs the server no longer knows
// (it should stop them).
type HeartbeatResponse struct {
	Unknown []string `json:"unknown_jobs,omitempty"`
}
