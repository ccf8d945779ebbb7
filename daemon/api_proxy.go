package daemon

import (
	"net/http"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/proxy"
	"gpud.dev/gpud/store"
)

// The server's services go through the gateway (proxy.Gateway): by path
// at /proxy/services/{project}/{run}/... on the API listener, and by host
// (<run>.<domain>) on the gateway's listeners (gateway_tls.go). The
// gateway checks a service's auth itself, against the same tokens and
// roles as the API (gatewayResolver.Authorize).

// startServiceGateway makes the gateway, feeds its resolver the store's
// changes, and hands it to the host routing and to the autoscaler.
func (s *Server) startServiceGateway() error {
	if s.gwResolver == nil {
		s.gwResolver = newGatewayResolver(s)
	}
	gw, err := proxy.New(s.gwResolver, proxy.Options{RateWindow: gatewayRateWindow, TrustedProxies: s.opts.TrustedProxies})
	if err != nil {
		return err
	}
	s.gw = gw
	sub := s.store.Subscribe("", store.KindRun, store.KindJob, store.KindGateway)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.gwResolver.feedLoop(s.ctx, sub)
	}()
	s.gateway.serveServices(gw)
	s.setRequestRates(gw)
	return nil
}

// openService sends a request for an active service to the gateway,
// which authorizes it as the service's auth says; any other proxy path
// goes to authed (the API's token and role checks, then
// handleServiceProxy), so a caller without a token learns nothing of a
// run that is no service: it gets the API's 401.
func (s *runsAPI) openService(authed http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		project, name := r.PathValue("project"), r.PathValue("run")
		svc, ok := s.gwResolver.Service(project, name)
		if !ok {
			authed.ServeHTTP(w, r)
			return
		}
		s.gw.ServeService(w, r, svc, proxy.PathPrefix+project+"/"+name)
	})
}

// handleServiceProxy answers, for a member of the project, a proxy path
// that names no active service.
func (s *runsAPI) handleServiceProxy(w http.ResponseWriter, r *http.Request) error {
	run, err := s.authorizedRun(r)
	if err != nil {
		return err
	}
	rs, err := s.runSpec(run)
	if err != nil {
		return err
	}
	if rs.Type != api.KindService {
		return apiErr(http.StatusNotFound, api.CodeNotFound, "", "run %q is a %s: only services are served at /proxy/services/", run.Name, rs.Type)
	}
	return apiErr(http.StatusServiceUnavailable, proxy.CodeNoReplica, "", "service %q is %s: it takes no requests", run.Name, run.Status)
}

// handleMetrics serves the gateway's Prometheus metrics.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	s.gw.MetricsHandler().ServeHTTP(w, r)
	return nil
}
