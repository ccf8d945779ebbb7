package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// Gateways are per project: record id "project/name". A gateway tells the
// server which domain the project's services are served at
// (https://<run>.<domain>) and how their certificates come; the server's
// own listeners (gateway_tls.go) serve every gateway. Without a gateway a
// project's services use the server's --domain: the default project's at
// <run>.<domain>, another project's at <run>.<project>.<domain> (one
// wildcard DNS record, *.<domain>, covers both).

// gatewayView is what the server uses of a gateway record.
type gatewayView struct {
	Project, Name string
	Domain        string
	Default       bool
	// Plain is certificate: none: its services are served over plain
	// HTTP on the HTTP listener, and no certificate is obtained for them.
	Plain bool
}

func gatewayID(project, name string) string { return project + "/" + name }

// gatewayOf decodes a gateway record.
func gatewayOf(r store.Record) (gatewayView, error) {
	cs, err := configSpecOf(r)
	if err != nil {
		return gatewayView{}, err
	}
	cfg, err := api.Parse("", cs.Config)
	if err == nil && cfg.Gateway == nil {
		err = fmt.Errorf("the configuration is a %s, not a gateway", cfg.Kind)
	}
	if err != nil {
		return gatewayView{}, &corruptRecordError{Kind: r.Kind, ID: r.ID, Part: "spec", Err: err}
	}
	g := cfg.Gateway
	return gatewayView{Project: r.Project, Name: r.Name, Domain: strings.ToLower(g.Domain), Default: g.Default,
		Plain: g.Certificate == nil || g.Certificate.Type == "none"}, nil
}

// gatewaysOf lists a project's readable gateways ("" lists every
// project's), each decoded once per record version; a corrupt one is
// logged and left out.
func (s *Server) gatewaysOf(project string) []gatewayView {
	recs := s.store.Gateways().List()
	if project != "" {
		recs = s.store.Gateways().ByProject(project)
	}
	out := make([]gatewayView, 0, len(recs))
	for _, r := range recs {
		g, err := cachedFor(s, r, "gateway-view", gatewayOf)
		if err != nil {
			continue // logged once per record version by cachedFor: it serves nothing
		}
		out = append(out, g)
	}
	return out
}

// serviceGateway is the gateway a project's service uses: the one it
// names, else the project's default one, else the server's own domain
// (ok false: none, only path routing). choice is the service's gateway
// field (nil when it has none).
func (s *Server) serviceGateway(project string, choice *api.ServiceGateway) (gatewayView, bool) {
	if choice != nil && !choice.Use {
		return gatewayView{}, false
	}
	gws := s.gatewaysOf(project)
	for _, g := range gws {
		if choice != nil && choice.Name != "" && g.Name == choice.Name {
			return g, true
		}
	}
	if choice != nil && choice.Name != "" {
		return gatewayView{}, false // the plan refuses a gateway that does not exist
	}
	for _, g := range gws {
		if g.Default {
			return g, true
		}
	}
	if s.opts.Domain == "" {
		return gatewayView{}, false
	}
	d := s.opts.Domain
	if project != DefaultProject {
		d = project + "." + d
	}
	return gatewayView{Project: project, Domain: d, Plain: s.opts.GatewayTLS == GatewayTLSNone}, true
}

// serviceGatewayFields is what the gateway needs of a run's configuration.
type serviceGatewayFields struct {
	Gateway *json.RawMessage `json:"gateway"`
	HTTPS   *json.RawMessage `json:"https"`
}

// serviceGatewayChoice is a run's gateway and https fields, decoded once
// per run record version.
type serviceGatewayChoice struct {
	service bool
	choice  *api.ServiceGateway
	noHTTPS bool
}

func serviceChoiceOf(r store.Record) (serviceGatewayChoice, error) {
	rs, err := decodeSpec[runState](r)
	if err != nil || rs.Type != api.KindService {
		return serviceGatewayChoice{}, err
	}
	choice, noHTTPS, err := serviceChoice(rs)
	if err != nil {
		return serviceGatewayChoice{}, &corruptRecordError{Kind: r.Kind, ID: r.ID, Part: "spec", Err: err}
	}
	return serviceGatewayChoice{service: true, choice: choice, noHTTPS: noHTTPS}, nil
}

// serviceChoice reads a service run's gateway field from its stored
// configuration (nil: the field is not set) and whether it asks for
// plain HTTP (https: false).
func serviceChoice(rs runState) (choice *api.ServiceGateway, noHTTPS bool, err error) {
	var sc serviceGatewayFields
	if err := json.Unmarshal(rs.Config, &sc); err != nil {
		return nil, false, err
	}
	if sc.HTTPS != nil {
		var b bool
		noHTTPS = json.Unmarshal(*sc.HTTPS, &b) == nil && !b
	}
	if sc.Gateway == nil {
		return nil, noHTTPS, nil
	}
	var use bool
	if err := json.Unmarshal(*sc.Gateway, &use); err == nil {
		return &api.ServiceGateway{Use: use}, noHTTPS, nil
	}
	var name string
	if err := json.Unmarshal(*sc.Gateway, &name); err != nil {
		return nil, false, err
	}
	return &api.ServiceGateway{Name: name, Use: true}, noHTTPS, nil
}

// serviceHosts returns the hostnames (lower case) at which project's
// service run is served by a gateway, and whether they are served over
// plain HTTP (its gateway says certificate: none, or it says https:
// false); none when the service uses no gateway.
// The gateway's Resolver builds proxy.Service.Hosts with it.
func (s *Server) serviceHosts(project string, run store.Record) (hosts []string, plain bool) {
	sc, err := cachedFor(s, run, "service-gateway", serviceChoiceOf)
	if err != nil || !sc.service {
		return nil, false // a corrupt record is logged once by cachedFor
	}
	g, ok := s.serviceGateway(project, sc.choice)
	if !ok || g.Domain == "" {
		return nil, false
	}
	hosts = append([]string{strings.ToLower(run.Name) + "." + g.Domain}, s.customDomainsOf(run)...) // service_domains.go
	return hosts, g.Plain || sc.noHTTPS
}

// serviceAtHost finds the active service that host (lower case, no port)
// reaches: <run>.<domain> of a project's gateway, or of the server's
// domain. plain is whether it is served over plain HTTP.
func (s *Server) serviceAtHost(host string) (run store.Record, plain, ok bool) {
	name, domain, found := strings.Cut(host, ".")
	if !found || name == "" {
		return store.Record{}, false, false
	}
	var projects []string
	for _, g := range s.gatewaysOf("") {
		if g.Domain == domain {
			projects = append(projects, g.Project)
		}
	}
	if d := s.opts.Domain; d != "" {
		if domain == d {
			projects = append(projects, DefaultProject)
		} else if p, under := strings.CutSuffix(domain, "."+d); under && !strings.Contains(p, ".") {
			projects = append(projects, p)
		}
	}
	for _, p := range projects {
		r, err := s.runsAPI.findRun(p, name)
		if err != nil || finishedRun(r.Status) {
			continue
		}
		hosts, plain := s.serviceHosts(p, r)
		for _, h := range hosts {
			if h == host {
				return r, plain, true
			}
		}
	}
	if r, ok := s.serviceAtCustomDomain(host); ok { // a service's own domains (service_domains.go)
		if hosts, plain := s.serviceHosts(r.Project, r); slices.Contains(hosts, host) {
			return r, plain, true
		}
	}
	return store.Record{}, false, false
}

// checkGatewayDomain refuses a domain that is not a hostname, or that
// another project's gateway, or the server's own domain, already serves:
// one domain belongs to one project.
func (s *Server) checkGatewayDomain(project, name, domain string) error {
	if domain == "" {
		return badField("configuration.domain", "a gateway needs a domain: its services are served at https://<run>.<domain>")
	}
	if !validHostname(domain) {
		return badField("configuration.domain", "%q is not a hostname: write a DNS name like example.com (lower case letters, digits, hyphens and dots)", domain)
	}
	if d := s.opts.Domain; d != "" && (domain == d || strings.HasSuffix(domain, "."+d) || strings.HasSuffix(d, "."+domain)) {
		return badField("configuration.domain", "%s overlaps the server's own domain %s, whose hosts the server gives to projects by name; pick a domain outside it", domain, d)
	}
	for _, g := range s.gatewaysOf("") {
		if g.Project == project && g.Name == name {
			continue
		}
		if g.Domain == domain || strings.HasSuffix(domain, "."+g.Domain) || strings.HasSuffix(g.Domain, "."+domain) {
			if g.Project != project {
				return conflict("domain %s overlaps a gateway of another project; pick another domain", domain)
			}
			return conflict("domain %s overlaps gateway %q of this project; delete or change that one first", domain, g.Name)
		}
	}
	return s.checkGatewayDomainFreeOfServices(project, domain) // service_domains.go
}

func validHostname(h string) bool {
	if len(h) > 253 || !strings.Contains(h, ".") {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func (s *fleetsAPI) handleApplyGateway(w http.ResponseWriter, r *http.Request) error {
	project, c, cfg, err := s.readApplyConfig(w, r, api.RoleManager)
	if err != nil {
		return err
	}
	g := cfg.Gateway
	if g == nil {
		return badField("configuration.type", "%s is not a gateway; apply it with the matching endpoint", cfg.Kind)
	}
	if g.Name == "" {
		return badField("configuration.name", "a gateway needs a name: `gpud gateway delete NAME` and a service's `gateway: NAME` refer to it")
	}
	g.Domain = strings.ToLower(strings.TrimSuffix(g.Domain, "."))
	s.gateway.applyMu.Lock()
	defer s.gateway.applyMu.Unlock()
	if err := s.checkGatewayDomain(project, g.Name, g.Domain); err != nil {
		return err
	}
	var muts []store.Mutation
	if g.Default {
		// One default per project: applying a default clears the others'.
		for _, other := range s.store.Gateways().ByProject(project) {
			ov, err := gatewayOf(other)
			if err != nil || !ov.Default || other.Name == g.Name {
				continue
			}
			oc, err := configSpecOf(other)
			if err != nil {
				return err
			}
			ocfg, err := api.Parse("", oc.Config)
			if err != nil {
				return err
			}
			ocfg.Gateway.Default = false
			norm, err := json.Marshal(ocfg)
			if err != nil {
				return err
			}
			other.Spec = encodeSpec(configState{Config: norm})
			muts = append(muts, store.Put(other))
		}
	}
	norm, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	rec := store.Record{Kind: store.KindGateway, ID: gatewayID(project, g.Name), Project: project, Name: g.Name, User: c.name, Status: "active", Spec: encodeSpec(configState{Config: norm})}
	muts = append(muts, store.Put(rec), s.event(project, store.KindGateway, rec.ID, "applied", "applied by "+c.name))
	if _, err := s.store.Apply(r.Context(), muts...); err != nil {
		return err
	}
	rec, err = s.store.Gateways().Get(rec.ID)
	if err != nil {
		return err
	}
	out, err := s.gatewayOut(rec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) gatewayOut(r store.Record) (api.Gateway, error) {
	g, err := gatewayOf(r)
	if err != nil {
		return api.Gateway{}, err
	}
	cert, scheme := "lets-encrypt", "https"
	if g.Plain {
		cert, scheme = "none", "http"
	}
	return api.Gateway{Name: g.Name, Project: g.Project, Domain: g.Domain, Default: g.Default, Certificate: cert,
		ServiceURL: scheme + "://<run>." + g.Domain, Listening: s.gateway.listening(g.Plain),
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}, nil
}

func (s *fleetsAPI) handleListGateways(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	out := []api.Gateway{}
	for _, rec := range s.store.Gateways().ByProject(project) {
		g, err := s.gatewayOut(rec)
		if err != nil {
			continue // logged by gatewaysOf's readers; a listing skips it
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *fleetsAPI) handleDeleteGateway(w http.ResponseWriter, r *http.Request) error {
	project, c, err := s.authorize(r, api.RoleManager)
	if err != nil {
		return err
	}
	name := r.PathValue("gateway")
	id := gatewayID(project, name)
	if _, err := s.store.Gateways().Get(id); err != nil {
		return notFound("gateway", name)
	}
	if _, err := s.store.Apply(r.Context(), store.Delete(store.KindGateway, id), s.event(project, store.KindGateway, id, "deleted", "deleted by "+c.name)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkServiceGateway is the plan's check of a service's gateway field:
// a named gateway must exist in the project, and a service that asks for
// a gateway needs one the server serves.
func checkServiceGateway(fc *fieldCheck, _ string) *refusal {
	choice := fc.cfg.Service.Gateway
	if choice == nil || !choice.Use || fc.srv == nil {
		return nil // gateway: false is path routing, which the server's proxy does
	}
	g, ok := fc.srv.serviceGateway(fc.project, choice)
	switch {
	case !ok && choice.Name != "":
		return &refusal{Why: fmt.Sprintf("project %s has no gateway %q", fc.project, choice.Name),
			Instead: "apply it first (gpud apply gateway.yml; gpud gateway list shows them), or write gateway: true for the default one"}
	case !ok:
		return &refusal{Why: "no gateway serves this project: it has no default gateway and the server runs without --domain",
			Instead: "apply a gateway with default: true, start gpud serve with --domain, or write gateway: false (the service is at /proxy/services/PROJECT/RUN/)"}
	case !fc.srv.gateway.listening(g.Plain) && g.Plain:
		return &refusal{Why: "the server runs no gateway listener (gpud serve without --domain), so no gateway serves the service",
			Instead: "start gpud serve with --domain (or --http-listen), or write gateway: false"}
	case !fc.srv.gateway.listening(g.Plain):
		return &refusal{Why: fmt.Sprintf("gateway %s serves HTTPS, and the server runs no HTTPS listener (gpud serve without --domain, or with --tls none)", g.Domain),
			Instead: "start gpud serve with --domain and --tls acme or internal, give the gateway certificate: {type: none}, or write gateway: false"}
	}
	return nil
}

// handleGatewayHost tells a standalone gateway which service a hostname
// reaches. The caller sees only services of its own projects: any other
// host, known or not, is the same 404, so hostnames do not leak which
// runs other projects have.
func (s *Server) handleGatewayHost(w http.ResponseWriter, r *http.Request) error {
	host := strings.ToLower(strings.TrimSuffix(r.PathValue("host"), "."))
	run, plain, ok := s.hostAt(host)
	if ok {
		if _, err := s.projectRole(callerOf(r), run.Project); err != nil {
			ok = false
		}
	}
	if !ok {
		return notFound("service host", host)
	}
	writeJSON(w, http.StatusOK, api.GatewayHost{Host: host, Project: run.Project, Run: run.Name, Plain: plain})
	return nil
}
