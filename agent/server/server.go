// Package server serves the agent HTTP API (/api/v1, bearer-token auth)
// and Prometheus /metrics for one *agent.Agent. The same handler is served
// on TCP, on a unix socket, through a forwarded SSH connection or through
// a registration tunnel.
//
// It also assembles a host's agent (OpenHost): the runtime under its
// policy, the accelerators, the state and the API with its token. `gpud
// agent` and the server's local agent are both opened there, so a remote
// agent and the embedded one behave alike.
//
// server must not import daemon, store, sched, plugins or proxy.
package server

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"golang.org/x/crypto/ssh"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/agent/metrics"
	"gpud.dev/gpud/api"
)

// maxSpecBytes bounds a start request body.
const maxSpecBytes = 1 << 20

// New returns the API handler. Every route but /healthz requires
// "Authorization: Bearer <token>"; an empty token is refused at start so
// an agent is never served open by mistake.
func New(a *agent.Agent, token string, log zerolog.Logger) (http.Handler, error) {
	if token == "" {
		return nil, errors.New("agent server: a token is required")
	}
	s := &server{a: a, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /api/v1/host", s.host)
	mux.HandleFunc("GET /api/v1/accelerators", s.accelerators)
	mux.HandleFunc("POST /api/v1/jobs", s.start)
	mux.HandleFunc("GET /api/v1/jobs", s.list)
	mux.HandleFunc("GET /api/v1/jobs/{id}", s.get)
	mux.HandleFunc("DELETE /api/v1/jobs/{id}", s.remove)
	mux.HandleFunc("POST /api/v1/jobs/{id}/stop", s.stop)
	mux.HandleFunc("GET /api/v1/jobs/{id}/wait", s.wait)
	mux.HandleFunc("GET /api/v1/jobs/{id}/logs", s.logs)
	mux.HandleFunc("GET /api/v1/jobs/{id}/metrics", s.metrics)
	mux.HandleFunc("HEAD /api/v1/uploads/{sha256}", s.hasUpload)
	mux.HandleFunc("PUT /api/v1/uploads/{sha256}", s.putUpload)
	mux.HandleFunc("GET /api/v1/jobs/{id}/ssh", s.ssh)
	mux.HandleFunc("GET /api/v1/jobs/{id}/ports/{port}", s.portRelay)
	mux.HandleFunc("GET /api/v1/volumes/{project}/{id}", s.volumeUsage)
	mux.HandleFunc("DELETE /api/v1/volumes/{project}/{id}", s.removeVolume)
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics.NewRegistry(a), promhttp.HandlerOpts{}))
	return authenticate(token, mux), nil
}

type server struct {
	a   *agent.Agent
	log zerolog.Logger

	hostKeyOnce sync.Once // ssh.go
	hostKey     ssh.Signer
	hostKeyErr  error
}

func authenticate(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpud-agent"`)
			writeError(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, api.AgentError{Error: err.Error()})
}

// fail maps an agent error to its status code.
func fail(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, agent.ErrNotFound):
		writeError(w, http.StatusNotFound, err)
	case errors.Is(err, agent.ErrInvalid):
		writeError(w, http.StatusBadRequest, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, err)
	default:
		writeError(w, http.StatusInternalServerError, err)
	}
}

func (s *server) host(w http.ResponseWriter, r *http.Request) {
	h, err := s.a.Host(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

func (s *server) accelerators(w http.ResponseWriter, r *http.Request) {
	h, err := s.a.Host(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h.Accelerators)
}

func (s *server) start(w http.ResponseWriter, r *http.Request) {
	var spec api.JobSpec
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSpecBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		writeError(w, http.StatusBadRequest, errors.New("job spec: "+err.Error()))
		return
	}
	st, err := s.a.Start(r.Context(), spec)
	if err != nil {
		if errors.Is(err, agent.ErrInvalid) {
			fail(w, err)
			return
		}
		// The job exists, failed: report its status with the error.
		writeJSON(w, http.StatusUnprocessableEntity, struct {
			api.AgentError
			Job api.JobStatus `json:"job"`
		}{api.AgentError{Error: err.Error()}, st})
		return
	}
	writeJSON(w, http.StatusCreated, st)
}

func (s *server) list(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.a.List())
}

func (s *server) get(w http.ResponseWriter, r *http.Request) {
	st, err := s.a.Get(r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *server) remove(w http.ResponseWriter, r *http.Request) {
	if err := s.a.Remove(r.Context(), r.PathValue("id")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) stop(w http.ResponseWriter, r *http.Request) {
	st, err := s.a.Stop(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, st)
}

// wait long-polls until the job is final; ?timeout=30s bounds it (the
// status so far is returned with 200 either way; check State).
func (s *server) wait(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if t := r.URL.Query().Get("timeout"); t != "" {
		d, err := api.ParseDuration(t)
		if err != nil {
			writeError(w, http.StatusBadRequest, errors.New("timeout: "+err.Error()))
			return
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	st, err := s.a.Wait(ctx, r.PathValue("id"))
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *server) metrics(w http.ResponseWriter, r *http.Request) {
	m, err := s.a.Metrics(r.Context(), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// parseSince reads an RFC 3339 time or a duration back from now ("10m").
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := api.ParseDuration(v)
	if err != nil {
		return time.Time{}, errors.New(`since: use an RFC 3339 time or a duration like "10m"`)
	}
	return now.Add(-d), nil
}

func boolParam(r *http.Request, name string, def bool) bool {
	v := strings.ToLower(r.URL.Query().Get(name))
	switch v {
	case "":
		return def
	case "1", "true", "yes":
		return true
	default:
		return false
	}
}
