package daemon

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// Custom domains per service (a gpud extension: `domains: [api.example.com]`
// on a service). The gateway routes each declared hostname to the service
// and gets a certificate for it on demand, like <run>.<domain>: only while
// an active service declares it (allowCertificate asks hostAt, which asks
// serviceAtHost, which falls back to this index). One hostname belongs to
// one service: the plan refuses a hostname that another service (of any
// project, or another run name of this one) declares, or that is, or is
// under, a gateway's domain or the server's own domain (those hosts are
// given out by run name); a gateway is refused a domain that covers a
// hostname a service declares.

// serviceDomainsOf reads a service run's declared hostnames from its
// stored configuration.
func serviceDomainsOf(r store.Record) ([]string, error) {
	rs, err := decodeSpec[runState](r)
	if err != nil || rs.Type != api.KindService || len(rs.Config) == 0 {
		return nil, err
	}
	var f struct {
		Domains []string `json:"domains"`
	}
	if err := json.Unmarshal(rs.Config, &f); err != nil {
		return nil, &corruptRecordError{Kind: r.Kind, ID: r.ID, Part: "spec", Err: err}
	}
	return f.Domains, nil
}

// domainIndex maps each hostname an active service declares to that
// run, rebuilt once per host-cache generation (a run or gateway changed).
type domainIndex struct {
	mu    sync.Mutex
	gen   uint64
	built bool
	hosts map[string]store.Record
}

func (s *Server) domainIndex() map[string]store.Record {
	ix := &s.domains
	gen := s.gateway.hosts.gen.Load()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.built && ix.gen == gen {
		return ix.hosts
	}
	hosts := s.buildDomainIndex()
	ix.gen, ix.built, ix.hosts = gen, true, hosts
	return hosts
}

// buildDomainIndex scans the active runs for declared hostnames: what
// domainIndex caches, and what the plan's checks read fresh (the cache
// follows the change feed, a moment behind a commit).
func (s *Server) buildDomainIndex() map[string]store.Record {
	hosts := map[string]store.Record{}
	runs := s.store.Runs().List()
	// The oldest claim wins, should two applies have raced past the plan.
	sort.Slice(runs, func(i, j int) bool { return runs[i].CreatedAt.Before(runs[j].CreatedAt) })
	for _, r := range runs {
		if finishedRun(r.Status) {
			continue
		}
		ds, err := cachedFor(s, r, "service-domains", serviceDomainsOf)
		if err != nil {
			continue // logged once per version by cachedFor
		}
		for _, d := range ds {
			if _, taken := hosts[d]; !taken {
				hosts[d] = r
			}
		}
	}
	return hosts
}

// serviceAtCustomDomain finds the active service that declared host.
func (s *Server) serviceAtCustomDomain(host string) (store.Record, bool) {
	r, ok := s.domainIndex()[host]
	return r, ok
}

// customDomainsOf is the hostnames run declares and holds (not claimed
// first by an older service), for its proxy.Service.Hosts.
func (s *Server) customDomainsOf(run store.Record) []string {
	ds, err := cachedFor(s, run, "service-domains", serviceDomainsOf)
	if err != nil || len(ds) == 0 {
		return nil
	}
	ix := s.domainIndex()
	var out []string
	for _, d := range ds {
		if r, ok := ix[d]; ok && r.ID == run.ID {
			out = append(out, d)
		}
	}
	return out
}

// underDomain says whether host is domain or a name under it.
func underDomain(host, domain string) bool {
	return domain != "" && (host == domain || strings.HasSuffix(host, "."+domain))
}

// checkServiceDomains is the plan's check of `domains`: hostnames, the
// gateway that would serve them, and who else holds them.
func checkServiceDomains(fc *fieldCheck, _ string) *refusal {
	sv := fc.cfg.Service
	if sv == nil {
		return nil
	}
	seen := map[string]bool{}
	for _, d := range sv.Domains {
		if !validHostname(d) || strings.HasPrefix(d, "*.") {
			return &refusal{Why: fmt.Sprintf("%q is not a hostname (wildcards are not served)", d),
				Instead: "write DNS names like api.example.com: lower case letters, digits, hyphens and dots"}
		}
		if seen[d] {
			return &refusal{Why: fmt.Sprintf("%s is listed twice", d), Instead: "list each hostname once"}
		}
		seen[d] = true
	}
	s := fc.srv
	if s == nil || len(sv.Domains) == 0 {
		return nil // offline validation: the server checks the rest
	}
	if g, ok := s.serviceGateway(fc.project, sv.Gateway); !ok || g.Domain == "" || !s.gateway.listening(g.Plain) {
		return &refusal{Why: "custom domains are served by the gateway that serves the service at <run>.<domain>, and this service has none (gateway: false, no gateway for the project and no --domain, or no listener for it)",
			Instead: "give the project a gateway, or start gpud serve with --domain; or drop domains"}
	}
	fresh := s.buildDomainIndex()
	for _, d := range sv.Domains {
		if underDomain(d, s.opts.Domain) {
			return &refusal{Why: fmt.Sprintf("%s is under the server's own domain %s, whose hosts the server gives to projects and runs by name", d, s.opts.Domain),
				Instead: "name the run after the host instead (a run named api is api." + s.opts.Domain + "), or pick a name outside that domain"}
		}
		for _, g := range s.gatewaysOf("") {
			if underDomain(d, g.Domain) {
				return &refusal{Why: fmt.Sprintf("%s is under the domain of a gateway (%s), whose hosts are given to runs by name", d, g.Domain),
					Instead: "pick a name outside every gateway's domain, or, in that gateway's project, name the run after the host"}
			}
		}
		if r, ok := fresh[d]; ok && (r.Project != fc.project || fc.run == nil || r.Name != fc.run.Name || fc.run.Name == "") {
			if r.Project != fc.project {
				return &refusal{Why: fmt.Sprintf("%s is declared by a service of another project", d), Instead: "pick another hostname"}
			}
			return &refusal{Why: fmt.Sprintf("%s is declared by service %s of this project", d, r.Name), Instead: "drop it there first (apply that service without it, or stop it), or pick another hostname"}
		}
	}
	return nil
}

// checkGatewayDomainFreeOfServices refuses a gateway's domain when it is,
// or covers, a hostname that an active service of another project
// declared: that host would change hands.
func (s *Server) checkGatewayDomainFreeOfServices(project, domain string) error {
	for host, r := range s.buildDomainIndex() {
		if !underDomain(host, domain) {
			continue
		}
		if r.Project != project {
			return conflict("domain %s covers %s, which a service of another project declares; pick another domain", domain, host)
		}
		return conflict("domain %s covers %s, which service %s of this project declares in domains; drop it there first, or pick another domain", domain, host, r.Name)
	}
	return nil
}
