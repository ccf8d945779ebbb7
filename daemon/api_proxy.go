package daemon

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// handleServiceProxy serves /proxy/services/{project}/{run}/... : it picks
// a running replica round-robin and reverse-proxies to its published port
// with the prefix stripped, flushing as bytes arrive (SSE and streaming
// responses are not buffered).
func (s *runsAPI) handleServiceProxy(w http.ResponseWriter, r *http.Request) error {
	run, err := s.authorizedRun(r)
	if err != nil {
		return err
	}
	return s.proxyService(w, r, run, false)
}

// openService serves a service whose configuration says auth: false to
// anyone; every other request goes to authed (the token and role checks).
// A caller without a token learns nothing more than before: an unknown
// run, a task, or a service with auth gets the same 401.
func (s *runsAPI) openService(authed http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		run, ok := s.openRun(r.PathValue("project"), r.PathValue("run"))
		if !ok {
			authed.ServeHTTP(w, r)
			return
		}
		// The service's own Authorization header (an API key of the
		// model server) goes through; a gpud token never reaches the
		// service's code, whoever wrote it.
		token, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		_, err := s.store.UserByToken(token)
		keep := !(bearer && token != "" && err == nil)
		s.route(func(w http.ResponseWriter, r *http.Request) error {
			return s.proxyService(w, r, run, keep)
		}).ServeHTTP(w, r)
	})
}

// openRun finds the run named in a proxy path if it is an active service
// with auth: false.
func (s *runsAPI) openRun(project, name string) (store.Record, bool) {
	run, err := s.findRun(project, name)
	if err != nil || finishedRun(run.Status) {
		return store.Record{}, false
	}
	rs, err := s.runSpec(run)
	if err != nil || rs.Type != api.KindService || !rs.OpenService {
		return store.Record{}, false
	}
	return run, true
}

// proxyService forwards r to a running replica of run. keepAuth passes
// the Authorization header on: it is the service's own, not a gpud token.
func (s *runsAPI) proxyService(w http.ResponseWriter, r *http.Request, run store.Record, keepAuth bool) error {
	rs, err := s.runSpec(run)
	if err != nil {
		return err
	}
	s.svc.counter.add(run.Project + "/" + run.Name)
	targets, err := s.serviceTargets(run)
	if err != nil {
		return err
	}
	if len(targets) == 0 && s.scalesToZero(run) {
		// Scale from zero: the request waits for the first replica.
		if targets, err = s.waitColdStart(r.Context(), run); err != nil {
			return err
		}
	}
	if len(targets) == 0 {
		return apiErr(http.StatusServiceUnavailable, "no_replica", "", "service %q has no running replica (status %s)", run.Name, run.Status)
	}
	target := targets[int(s.proxyRR.Add(1))%len(targets)]
	prefix := "/proxy/services/" + run.Project + "/" + r.PathValue("run")
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: target})
			pr.Out.URL.Path = "/" + strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, prefix), "/")
			if rs.KeepPrefix {
				// strip_prefix: false: the service sees the whole path.
				pr.Out.URL.Path = r.URL.Path
			}
			pr.Out.URL.RawPath = ""
			if !keepAuth {
				pr.Out.Header.Del("Authorization") // the gpud token stays here
			}
			pr.SetXForwarded()
		},
		FlushInterval: -1,
	}
	rp.ServeHTTP(w, r)
	return nil
}

// serviceTargets are the addresses of run's ready replicas (running and,
// with probes, passing them: replicaReady).
func (s *runsAPI) serviceTargets(run store.Record) ([]string, error) {
	var targets []string
	for _, j := range s.store.Jobs().ByRun(run.ID) {
		if j.Status != store.JobRunning || !s.replicaReady(j.ID) {
			continue
		}
		js, err := s.jobSpec(j)
		if err != nil {
			return nil, err // 500 naming the job: a replica the proxy cannot read
		}
		for _, p := range js.Ports {
			if p.Host != 0 {
				host := p.HostIP
				if host == "" || host == "0.0.0.0" {
					host = "127.0.0.1"
				}
				targets = append(targets, fmt.Sprintf("%s:%d", host, p.Host))
				break
			}
		}
	}
	return targets, nil
}

// proxyCounter spreads requests over replicas.
type proxyCounter = atomic.Uint64
