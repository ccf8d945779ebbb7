package daemon

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"

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
	var targets []string
	for _, j := range s.store.Jobs().ByRun(run.ID) {
		if j.Status != store.JobRunning {
			continue
		}
		js, err := s.jobSpec(j)
		if err != nil {
			return err // 500 naming the job: a replica the proxy cannot read
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
	if len(targets) == 0 {
		return apiErr(http.StatusServiceUnavailable, "no_replica", "", "service %q has no running replica (status %s)", run.Name, run.Status)
	}
	target := targets[int(s.proxyRR.Add(1))%len(targets)]
	prefix := "/proxy/services/" + run.Project + "/" + r.PathValue("run")
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: target})
			pr.Out.URL.Path = "/" + strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, prefix), "/")
			pr.Out.URL.RawPath = ""
			pr.Out.Header.Del("Authorization")
			pr.SetXForwarded()
		},
		FlushInterval: -1,
	}
	rp.ServeHTTP(w, r)
	return nil
}

// proxyCounter spreads requests over replicas.
type proxyCounter = atomic.Uint64
