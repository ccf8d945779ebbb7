package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// runState is what the server keeps in a run record's Spec.
type runState struct {
	Type api.Kind `json:"type"`
	// Config is the normalized configuration as submitted, with its ${{ }}
	// references unresolved (resolved values live sealed on the jobs).
	Config      json.RawMessage `json:"config"`
	Priority    int             `json:"priority"`
	Preemptible bool            `json:"preemptible"`
	MinNodes    int             `json:"min_nodes"`
	Attempt     int             `json:"attempt"`
	WhyPending  string          `json:"why_pending,omitempty"`
	SubmittedAt time.Time       `json:"submitted_at"`
	StartedAt   time.Time       `json:"started_at,omitzero"`
	FinishedAt  time.Time       `json:"finished_at,omitzero"`
	ExitCode    *int            `json:"exit_code,omitempty"`
	// Stop is set by a stop request; Abort skips the grace period.
	Stop  bool `json:"stop,omitempty"`
	Abort bool `json:"abort,omitempty"`
	// RetryAt is when the attempt a retry created starts (its jobs' NotBefore).
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Retries counts the retries of the current failure series: the
	// next one waits retryBackoff().Delay(Retries+1).
	Retries      int           `json:"retries,omitempty"`
	RetryEvents  []string      `json:"retry_events,omitempty"`
	RetryFor     time.Duration `json:"retry_for,omitempty"` // 0: retry forever while events match
	MaxDuration  time.Duration `json:"max_duration,omitempty"`
	StopDuration time.Duration `json:"stop_duration,omitempty"`
	// FirstFailedAt starts the retry duration window.
	FirstFailedAt time.Time `json:"first_failed_at,omitzero"`
	// StartupOrder and StopCriteria are a multi-node task's (api.Startup*,
	// api.Stop*); empty means any order and all-done.
	StartupOrder string `json:"startup_order,omitempty"`
	StopCriteria string `json:"stop_criteria,omitempty"`
	// MasterDone is set when stop_criteria master-done stopped the
	// workers because the master (node rank 0) ended.
	MasterDone bool `json:"master_done,omitempty"`
	// Cron is the run's schedule (UTC): each attempt waits for the next
	// tick, and a finished attempt is resubmitted for the tick after.
	Cron []string `json:"cron,omitempty"`
	// MinGPUUtil and UtilWindow are the utilization_policy: the run stops
	// once every GPU of one of its jobs stayed below MinGPUUtil percent for
	// UtilWindow.
	MinGPUUtil int           `json:"min_gpu_util,omitempty"`
	UtilWindow time.Duration `json:"util_window,omitempty"`
	// Inactivity is a dev environment's inactivity_duration: it stops
	// once no client was attached for that long.
	Inactivity time.Duration `json:"inactivity,omitempty"`
	// Targets are the runtimes and host kinds that honour every field the
	// run sets (fields.go); empty: any.
	Targets runTargets `json:"targets,omitzero"`
	// Place is where the run's placement fields let it go (placement.go).
	Place runPlacement `json:"place,omitzero"`
	// OpenService is a service with auth: false (its proxy needs no
	// token); KeepPrefix one with strip_prefix: false.
	OpenService bool `json:"open_service,omitempty"`
	KeepPrefix  bool `json:"keep_prefix,omitempty"`
	// Service is a service's replica count, deployment and rolling update
	// (autoscale.go, rollout.go); nil until the first of them.
	Service *serviceRunState `json:"service,omitempty"`
}

// jobRecordSpec is what the server keeps in a job record's Spec: the
// server's bookkeeping of one job (placement, timestamps, retry marks) with
// the agent's api.JobSpec inside. It is neither api.JobState (an agent's
// job state) nor the scheduler's per-cycle job.
type jobRecordSpec struct {
	ReplicaNum int `json:"replica_num"`
	NodeRank   int `json:"node_rank"`
	NodesNum   int `json:"nodes_num"`
	// Group is the task group's or service replica group's name, if any.
	Group   string `json:"group,omitempty"`
	Attempt int    `json:"attempt"`
	// Request is what the scheduler places.
	Request taskRequest `json:"request"`
	// Spec is the agent job spec without its environment, which is sealed
	// (it may hold secrets).
	Spec    api.JobSpec `json:"spec"`
	Devices []int       `json:"devices,omitempty"`
	// Price is the hourly price of the job's share of what it was placed
	// on (0 on own hosts; run_cost.go).
	Price       float64       `json:"price,omitempty"`
	ExitCode    *int          `json:"exit_code,omitempty"`
	WhyPending  string        `json:"why_pending,omitempty"`
	Ports       []api.JobPort `json:"ports,omitempty"`
	SubmittedAt time.Time     `json:"submitted_at"`
	BoundAt     time.Time     `json:"bound_at,omitzero"`
	StartedAt   time.Time     `json:"started_at,omitzero"`
	FinishedAt  time.Time     `json:"finished_at,omitzero"`
	// Evicted marks a job the scheduler took back (reclaim, preempt);
	// its run is requeued once it has stopped.
	Evicted bool `json:"evicted,omitempty"`
	// Abort marks a stop that skips the grace period.
	Abort bool `json:"abort,omitempty"`
	// Interrupted marks a job its host lost (the agent no longer has it,
	// its exit is unknown, or its host has no agent): retry's
	// interruption event.
	Interrupted bool `json:"interrupted,omitempty"`
	// NotBefore holds a scheduled (cron) job back from the scheduler
	// until that time.
	NotBefore time.Time `json:"not_before,omitzero"`
	// Deployment is the service deployment the replica belongs to (a
	// rolling update starts the next one); Retired marks a replica scaled
	// down or replaced, which a retry does not start again.
	Deployment int  `json:"deployment,omitempty"`
	Retired    bool `json:"retired,omitempty"`
	// Probes are a service replica's readiness probes (probes.go), kept
	// with the replica: old and new replicas of a rolling update each
	// answer their own.
	Probes []api.Probe `json:"probes,omitempty"`
}

// taskRequest is one job's resource request in scheduler units.
type taskRequest struct {
	GPU       int64  `json:"gpu"` // milli-GPUs
	GPUName   string `json:"gpu_name,omitempty"`
	GPUMemory int64  `json:"gpu_memory,omitempty"`
	CPU       int64  `json:"cpu"` // milli-cores
	Memory    int64  `json:"memory"`
	// GPUMemoryMax bounds device memory (0: none); Needs are the host
	// facts the job asks for (placement.go).
	GPUMemoryMax int64     `json:"gpu_memory_max,omitempty"`
	Needs        hostNeeds `json:"needs,omitzero"`
}

// instanceState is what the server keeps in an instance record's Spec.
type instanceState struct {
	Backend string       `json:"backend"`
	Host    api.HostInfo `json:"host"`
}

// configState is what the server keeps for fleets and queues applied from
// configurations.
type configState struct {
	Config json.RawMessage `json:"config,omitempty"`
}

// corruptRecordError is a stored record whose Spec (or sealed part) does
// not decode: the server never acts on such a record as if it were empty.
// Requests that need it fail with 500 internal naming the record; listings
// skip it and background loops leave it alone, both with a logged error.
type corruptRecordError struct {
	Kind store.Kind
	ID   string
	Part string // "spec" or "sealed"
	Err  error
}

func (e *corruptRecordError) Error() string {
	return fmt.Sprintf("%s %s: stored %s does not decode: %v", e.record(), e.ID, e.Part, e.Err)
}

// record names the kind of record in the singular ("job", "run").
func (e *corruptRecordError) record() string { return strings.TrimSuffix(string(e.Kind), "s") }

func (e *corruptRecordError) Unwrap() error { return e.Err }

// decodeSpec decodes r's Spec into a fresh T (an empty Spec is T's zero
// value); its error is a *corruptRecordError.
func decodeSpec[T any](r store.Record) (T, error) {
	var v T
	if len(r.Spec) == 0 {
		return v, nil
	}
	if err := json.Unmarshal(r.Spec, &v); err != nil {
		return v, &corruptRecordError{Kind: r.Kind, ID: r.ID, Part: "spec", Err: err}
	}
	return v, nil
}

// The typed accessors below decode a fresh copy, for a caller that changes
// and re-encodes it; readers use the Server's cached ones (speccache.go).

// jobSpecOf decodes a job record's Spec.
func jobSpecOf(j store.Record) (jobRecordSpec, error) { return decodeSpec[jobRecordSpec](j) }

// runSpecOf decodes a run record's Spec.
func runSpecOf(r store.Record) (runState, error) { return decodeSpec[runState](r) }

// instanceSpecOf decodes an instance record's Spec.
func instanceSpecOf(r store.Record) (instanceState, error) { return decodeSpec[instanceState](r) }

// configSpecOf decodes a fleet or queue record's Spec.
func configSpecOf(r store.Record) (configState, error) { return decodeSpec[configState](r) }

// sealedOf decodes a job's sealed part (its env, registry auth and any
// command that interpolates a secret); a job without one has none.
func sealedOf(j store.Record) (sealedJob, error) {
	var v sealedJob
	if len(j.Sealed) == 0 {
		return v, nil
	}
	if err := json.Unmarshal(j.Sealed, &v); err != nil {
		return v, &corruptRecordError{Kind: j.Kind, ID: j.ID, Part: "sealed", Err: err}
	}
	return v, nil
}

func encodeSpec(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		// Our own state types always marshal; a failure is a programming error.
		panic(fmt.Sprintf("daemon: encode spec: %v", err))
	}
	return b
}

// newID returns a random 16-hex-digit id.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// event records a transition of subject with its reason, at the server's
// clock's time.
func (s *Server) event(project string, kind store.Kind, id, status, reason string) store.Mutation {
	return store.Create(store.NewEvent(s.now(), project, kind, id, status, reason))
}

// finishedRun reports whether a run status is final.
func finishedRun(status string) bool {
	switch status {
	case store.RunTerminated, store.RunFailed, store.RunDone:
		return true
	}
	return false
}

// finishedJob reports whether a job status is final.
func finishedJob(status string) bool {
	switch status {
	case store.JobTerminated, store.JobAborted, store.JobFailed, store.JobDone:
		return true
	}
	return false
}

// queueID is the record id (and scheduler name) of a project's queue.
func queueID(project, name string) string { return project + "/" + name }

func decodeJSONBytes(b []byte, v any) error { return json.Unmarshal(b, v) }

// conflictPause waits before retry number attempt of a write that met a
// version conflict. The store validates against writes staged for its next
// commit before readers see them, so an immediate retry can read the same
// old version again; 1ms doubling up to 50ms lets that commit land.
func conflictPause(attempt int) {
	time.Sleep(min(time.Millisecond<<min(attempt, 6), 50*time.Millisecond))
}

// updateJob applies change to the job's latest version, retrying on
// version conflicts; change returns false to leave the job unchanged.
// Extra mutations (events) commit in the same transaction.
func (s *Server) updateJob(ctx context.Context, id string, change func(j *store.Record, js *jobRecordSpec) (bool, []store.Mutation)) error {
	for attempt := range 20 {
		if attempt > 0 {
			conflictPause(attempt)
		}
		j, err := s.store.Jobs().Get(id)
		if err != nil {
			return err
		}
		js, err := jobSpecOf(j)
		if err != nil {
			return err // a corrupt job is never rewritten from a zero spec
		}
		ok, extra := change(&j, &js)
		if !ok {
			return nil
		}
		j.Spec = encodeSpec(js)
		_, err = s.store.Apply(ctx, append([]store.Mutation{store.Update(j)}, extra...)...)
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("job %s: too many concurrent updates", id)
}

// logJobUpdate logs a failed updateJob of job j with what it was for. The
// callers are background steps (dispatch, watch, stop, host failure) that
// the resync safety net runs again; a corrupt job stays as it is, logged.
func (s *Server) logJobUpdate(err error, j store.Record, what string) {
	if err == nil || s.ctx.Err() != nil {
		return
	}
	if errors.Is(err, store.ErrNotFound) {
		// The job was deleted with its finished run: nothing is left to record.
		s.log.Debug().Err(err).Str("job", j.ID).Msg(what)
		return
	}
	s.log.Error().Err(err).Str("job", j.ID).Str("run", j.Run).Str("instance", j.Instance).Msg(what)
}

// logJobUpdateID is logJobUpdate for a job known by id only.
func (s *Server) logJobUpdateID(err error, id, what string) {
	s.logJobUpdate(err, store.Record{ID: id}, what)
}
