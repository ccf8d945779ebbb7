package daemon

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
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"gpud.dev/gpud/store"
)

// The SGLang router (Shepherd Model Gateway) learns its workers from the
// server, as dstack's service_router_worker_sync does: every few seconds,
// per service with a `router: {type: sglang}` group, the server lists the
// router's workers (GET /workers), asks each running, ready worker replica
// for its /server_info (through the replica's own port relay, as dstack
// asks through the replica's tunnel), registers the ready ones the router
// lacks (POST /workers, dstack's body) and removes the ones no replica
// stands for any more (DELETE /workers/{id}). The router reaches a worker
// at http://<its host's address>:<the published port> (router_groups.go,
// docs/gateway.md "Prefill–decode routers").

// routerSyncEvery paces a service's syncs (dstack: 5 s).
const routerSyncEvery = 2 * time.Second

// routerHTTPTimeout bounds each call to the router or a worker (dstack's
// _ROUTER_HTTP_TIMEOUT).
const routerHTTPTimeout = 10 * time.Second

// The bounds dstack puts on what the router and workers answer.
const (
	maxServerInfoBytes   = 256 << 10
	maxRouterListBytes   = 2 << 20
	maxRouterAckBytes    = 64 << 10
	maxRouterListWorkers = 8192
)

// routerSyncs is the sync's memory: the services whose sync runs now, and
// when each last started.
type routerSyncs struct {
	mu       sync.Mutex
	inflight map[string]bool
	last     map[string]time.Time
}

// routerTarget is a worker as dstack registers it with SGLang's router.
type routerTarget struct {
	URL            string `json:"url"`
	WorkerType     string `json:"worker_type"`
	BootstrapPort  *int   `json:"bootstrap_port,omitempty"`
	ConnectionMode string `json:"connection_mode"`
	RuntimeType    string `json:"runtime_type"`
}

// syncRouterWorkers starts, at most once per routerSyncEvery and never
// twice at once, the sync of v's SGLang router with its worker replicas.
// The service loop calls it on each tick.
func (s *Server) syncRouterWorkers(v serviceView) {
	rg, ok := routerOf(v.sv)
	if !ok || rg.typ != routerSGLang || v.st.Stop {
		return
	}
	var router *store.Record
	var routerSpec jobRecordSpec
	for i, j := range v.jobs {
		if rg.isRouter(v.specs[i].ReplicaNum) && j.Status == store.JobRunning && !v.specs[i].Retired {
			router, routerSpec = &v.jobs[i], v.specs[i]
			break
		}
	}
	if router == nil {
		return
	}
	now := time.Now()
	r := &s.routers
	r.mu.Lock()
	if r.inflight == nil {
		r.inflight, r.last = map[string]bool{}, map[string]time.Time{}
	}
	if r.inflight[v.run.ID] || now.Sub(r.last[v.run.ID]) < routerSyncEvery {
		r.mu.Unlock()
		return
	}
	r.inflight[v.run.ID], r.last[v.run.ID] = true, now
	for id, t := range r.last { // forget services not synced for long
		if now.Sub(t) > time.Hour && !r.inflight[id] {
			delete(r.last, id)
		}
	}
	r.mu.Unlock()
	go func() {
		defer func() {
			r.mu.Lock()
			delete(r.inflight, v.run.ID)
			r.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		defer cancel()
		if err := s.syncRouter(ctx, v, rg, *router, routerSpec); err != nil && ctx.Err() == nil {
			s.log.Debug().Err(err).Str("run", v.run.ID).Msg("router workers: not synced")
		}
	}()
}

// syncRouter is one sync of v's router replica with its workers.
func (s *Server) syncRouter(ctx context.Context, v serviceView, rg routerGroup, router store.Record, rs jobRecordSpec) error {
	port := v.sv.Port.Container
	rport, ok := replicaPort(rs.Ports, port)
	if !ok {
		rport, ok = replicaPort(rs.Spec.Ports, port)
	}
	if !ok {
		return fmt.Errorf("the router replica %s publishes no port", router.ID)
	}
	rc := s.replicaClient(router, rport)
	current, err := routerWorkers(ctx, rc)
	if err != nil {
		return err
	}
	var targets []routerTarget
	for i, j := range v.jobs {
		js := v.specs[i]
		if rg.isRouter(js.ReplicaNum) || j.Status != store.JobRunning || js.Retired || !s.replicaReady(j.ID) {
			continue
		}
		t, ok := s.workerTarget(ctx, j, js, port)
		if ok {
			targets = append(targets, t)
		}
	}
	return s.reconcileRouter(ctx, v, rc, current, targets)
}

// workerTarget probes worker j's /server_info and says how the router
// reaches it; ok false while it is not ready.
func (s *Server) workerTarget(ctx context.Context, j store.Record, js jobRecordSpec, port int) (routerTarget, bool) {
	cport, ok := replicaPort(js.Ports, port)
	if !ok || j.Instance == "" {
		return routerTarget{}, false
	}
	host := cport
	for _, p := range js.Ports {
		if p.Container == cport && p.Host != 0 {
			host = p.Host
		}
	}
	addr, err := s.dispatcher.instanceAddress(ctx, j.Instance)
	if err != nil {
		return routerTarget{}, false
	}
	workerURL := "http://" + net.JoinHostPort(addr, strconv.Itoa(host))
	var info struct {
		Status        string `json:"status"`
		Mode          string `json:"disaggregation_mode"`
		BootstrapPort *int   `json:"disaggregation_bootstrap_port"`
	}
	if err := routerCall(ctx, s.replicaClient(j, cport), http.MethodGet, "/server_info", nil, http.StatusOK, maxServerInfoBytes, &info); err != nil || info.Status != "ready" {
		return routerTarget{}, false
	}
	t := routerTarget{URL: workerURL, WorkerType: "regular", ConnectionMode: "http", RuntimeType: "sglang"}
	switch info.Mode {
	case "prefill":
		t.WorkerType, t.BootstrapPort = "prefill", info.BootstrapPort
	case "decode":
		t.WorkerType = "decode"
	}
	return t, true
}

// routerWorker is a worker in the router's list.
type routerWorker struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// routerWorkers lists the router's workers.
func routerWorkers(ctx context.Context, rc *http.Client) ([]routerWorker, error) {
	var list struct {
		Workers []json.RawMessage `json:"workers"`
	}
	if err := routerCall(ctx, rc, http.MethodGet, "/workers", nil, http.StatusOK, maxRouterListBytes, &list); err != nil {
		return nil, err
	}
	if len(list.Workers) > maxRouterListWorkers {
		list.Workers = list.Workers[:maxRouterListWorkers]
	}
	var out []routerWorker
	for _, raw := range list.Workers {
		var w routerWorker
		if json.Unmarshal(raw, &w) == nil && w.URL != "" {
			out = append(out, w)
		}
	}
	return out, nil
}

// reconcileRouter adds the targets the router lacks and removes the
// workers no target stands for, as dstack does (by normalized URL).
func (s *Server) reconcileRouter(ctx context.Context, v serviceView, rc *http.Client, current []routerWorker, targets []routerTarget) error {
	have := map[string]routerWorker{}
	for _, w := range current {
		have[normalizeWorkerURL(w.URL)] = w
	}
	want := map[string]routerTarget{}
	for _, t := range targets {
		want[normalizeWorkerURL(t.URL)] = t
	}
	var errs []error
	for _, u := range sortedKeys(want) {
		if _, ok := have[u]; ok {
			continue
		}
		t := want[u]
		body, err := json.Marshal(t)
		if err != nil {
			return err
		}
		if err := routerAccepted(ctx, rc, http.MethodPost, "/workers", body); err != nil {
			errs = append(errs, fmt.Errorf("register %s: %w", t.URL, err))
			continue
		}
		s.log.Info().Str("run", v.run.ID).Str("worker", t.URL).Str("type", t.WorkerType).Msg("router: registered a worker")
	}
	for _, u := range sortedKeys(have) {
		if _, ok := want[u]; ok {
			continue
		}
		w := have[u]
		if w.ID == "" {
			errs = append(errs, fmt.Errorf("remove %s: the router lists it without an id", w.URL))
			continue
		}
		if err := routerAccepted(ctx, rc, http.MethodDelete, "/workers/"+url.PathEscape(w.ID), nil); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", w.URL, err))
			continue
		}
		s.log.Info().Str("run", v.run.ID).Str("worker", w.URL).Msg("router: removed a worker")
	}
	return errors.Join(errs...)
}

// routerAccepted makes a /workers command and wants SGLang's 202
// {"status": "accepted"}.
func routerAccepted(ctx context.Context, rc *http.Client, method, path string, body []byte) error {
	var ack struct {
		Status string `json:"status"`
	}
	if err := routerCall(ctx, rc, method, path, body, http.StatusAccepted, maxRouterAckBytes, &ack); err != nil {
		return err
	}
	if ack.Status != "accepted" {
		return fmt.Errorf("%s %s: status %q, want accepted", method, path, ack.Status)
	}
	return nil
}

// routerCall makes one JSON call through rc and decodes at most max
// bytes of the answer into out; an answer other than want is an error.
func routerCall(ctx context.Context, rc *http.Client, method, path string, body []byte, want int, max int64, out any) error {
	ctx, cancel := context.WithTimeout(ctx, routerHTTPTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://replica"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := rc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("%s %s: HTTP %d, want %d", method, path, resp.StatusCode, want)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return err
	}
	if int64(len(b)) > max {
		return fmt.Errorf("%s %s: the answer is over %d bytes", method, path, max)
	}
	return json.Unmarshal(b, out)
}

// replicaClient is an HTTP client to job's port through the server's
// relay to it (dialJobPort), whatever host it runs on.
func (s *Server) replicaClient(job store.Record, port int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return s.dialJobPort(ctx, job, port)
		},
		DisableKeepAlives: true,
	}, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse // the replica's code answers: follow nothing it says
	}}
}

// normalizeWorkerURL drops surrounding space and a trailing slash of the
// path, as dstack's _normalize_worker_url.
func normalizeWorkerURL(u string) string {
	u = strings.TrimSpace(u)
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Path = strings.TrimRight(p.Path, "/")
	return p.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
