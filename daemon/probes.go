package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// Probe defaults, as dstack's.
const (
	defaultProbeTimeout  = 10 * time.Second
	defaultProbeInterval = 15 * time.Second
)

// replicaProbe is the state of one replica's probes: each probe's streak
// of consecutive successes. The replica is ready while every probe's
// streak reaches its ready_after; a failure resets that probe's streak
// (the gateway stops sending the replica requests until it passes again).
type replicaProbe struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	probes []api.Probe
	streak []int
	last   string // the last failure, for the replica's status
}

func (p *replicaProbe) ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, pr := range p.probes {
		if p.streak[i] < max(pr.ReadyAfter, 1) {
			return false
		}
	}
	return true
}

// passed reports whether probe i reached its ready_after.
func (p *replicaProbe) passed(i int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streak[i] >= max(p.probes[i].ReadyAfter, 1)
}

func (p *replicaProbe) record(i int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.streak[i], p.last = 0, err.Error()
		return
	}
	p.streak[i]++
}

// replicaReady says whether a running replica passed its probes (true
// for a service without probes). The gateway sends requests only to ready
// replicas. A retired replica (scaled down, or replaced by a rolling
// update) is never ready: it is draining.
func (s *Server) replicaReady(jobID string) bool {
	j, err := s.store.Jobs().Get(jobID)
	if err != nil || j.Status != store.JobRunning {
		return false
	}
	js, err := s.jobSpec(j)
	if err != nil || js.Retired {
		return false
	}
	if len(js.Probes) == 0 {
		return true
	}
	s.svc.mu.Lock()
	p := s.svc.probes[jobID]
	s.svc.mu.Unlock()
	return p != nil && p.ready()
}

// probeFailure is the last failure of a replica's probes, "" when none.
func (s *Server) probeFailure(jobID string) string {
	s.svc.mu.Lock()
	p := s.svc.probes[jobID]
	s.svc.mu.Unlock()
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// syncProbes starts the probes of the service's running replicas that
// have probes and no prober yet. A prober ends by itself once its
// replica stops running.
func (s *Server) syncProbes(v serviceView) {
	for i, j := range v.jobs {
		js := v.specs[i]
		if j.Status != store.JobRunning || js.Retired || len(js.Probes) == 0 || len(js.Spec.Ports) == 0 {
			continue
		}
		s.svc.mu.Lock()
		if s.svc.probes == nil {
			s.svc.probes = map[string]*replicaProbe{}
		}
		if _, ok := s.svc.probes[j.ID]; ok {
			s.svc.mu.Unlock()
			continue
		}
		ctx, cancel := context.WithCancel(s.ctx)
		p := &replicaProbe{cancel: cancel, probes: js.Probes, streak: make([]int, len(js.Probes))}
		s.svc.probes[j.ID] = p
		s.svc.mu.Unlock()
		port := js.Spec.Ports[0].Container
		for k := range js.Probes {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.runProbe(ctx, j.ID, port, p, k)
				s.dropProbe(j.ID, p)
			}()
		}
	}
}

// dropProbe forgets p, the prober of jobID, if it is still the one kept.
func (s *Server) dropProbe(jobID string, p *replicaProbe) {
	p.cancel()
	s.svc.mu.Lock()
	if s.svc.probes[jobID] == p {
		delete(s.svc.probes, jobID)
	}
	s.svc.mu.Unlock()
}

// stopProbes ends every prober (the server stops).
func (s *Server) stopProbes() {
	s.svc.mu.Lock()
	defer s.svc.mu.Unlock()
	for id, p := range s.svc.probes {
		p.cancel()
		delete(s.svc.probes, id)
	}
}

// runProbe runs probe k of a replica every interval (counted from the
// end of the last execution, as dstack's) until the replica stops
// running or ctx ends.
func (s *Server) runProbe(ctx context.Context, jobID string, port int, p *replicaProbe, k int) {
	pr := p.probes[k]
	interval := pr.Interval.Value
	if interval <= 0 {
		interval = defaultProbeInterval
	}
	for {
		j, err := s.store.Jobs().Get(jobID)
		if err != nil || j.Status != store.JobRunning {
			return
		}
		// until_ready: once passed, the probe is not run again and the
		// replica stays ready while it runs.
		if !pr.UntilReady || !p.passed(k) {
			was := p.ready()
			p.record(k, s.probeOnce(ctx, j, port, pr))
			if p.ready() != was {
				s.readinessChanged() // the gateway's snapshots no longer hold
			}
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// probeOnce sends one probe's request to the replica's port (through
// dialJobPort, wherever the replica runs); a 2xx answer within the
// timeout passes.
func (s *Server) probeOnce(ctx context.Context, j store.Record, port int, pr api.Probe) error {
	timeout := pr.Timeout.Value
	if timeout <= 0 {
		timeout = defaultProbeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return s.dialJobPort(ctx, j, port)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var body io.Reader
	if pr.Body != "" {
		body = strings.NewReader(pr.Body)
	}
	url := pr.URL
	if !strings.HasPrefix(url, "/") {
		url = "/" + url
	}
	req, err := http.NewRequestWithContext(ctx, strings.ToUpper(pr.Method), fmt.Sprintf("http://localhost:%d%s", port, url), body)
	if err != nil {
		return fmt.Errorf("probe %s %s: %w", strings.ToUpper(pr.Method), pr.URL, err)
	}
	for _, h := range pr.Headers {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Set(h.Name, h.Value)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s %s: %w", strings.ToUpper(pr.Method), pr.URL, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("probe %s %s: HTTP %d", strings.ToUpper(pr.Method), pr.URL, resp.StatusCode)
	}
	return nil
}
