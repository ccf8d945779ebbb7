package daemon

import (
	"fmt"
	"slices"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/sched"
)

// The plan-time side of backend fleets (fleet_backend.go): a run's
// `fleets:` may name one backend fleet of its project, whose backends
// exist; the plan's offers show which backend offers a run would use and
// through which fleet.

// checkRunFleets is the rule of a run's fleets: the names exist
// (checkFleets), at most one is a backend fleet (a job counts against one
// fleet's nodes), a run that names only a backend fleet is one that runs
// on job backends, and that fleet still has a backend.
func checkRunFleets(fc *fieldCheck, path string) *refusal {
	if r := checkFleets(fc, path); r != nil || path != "fleets" || fc.srv == nil {
		return r
	}
	var named []backendFleet
	for _, bf := range fc.srv.backendFleets() {
		if bf.project == fc.project && slices.Contains(fc.run.Fleets, bf.name) {
			named = append(named, bf)
		}
	}
	if len(named) > 1 {
		var names []string
		for _, bf := range named {
			names = append(names, bf.name)
		}
		return &refusal{Why: fmt.Sprintf("fleets %s are all backend fleets, and a run's jobs count against the nodes of one backend fleet",
			strings.Join(quoteAll(names), " and ")),
			Instead: "name one backend fleet (with any host fleets), or make one fleet with all the backends"}
	}
	if len(named) == 0 || len(fc.run.Fleets) > 1 {
		return nil // hosts of the other fleets may take it
	}
	bf := named[0]
	if fc.run.Type == api.KindDevEnvironment {
		return &refusal{Why: fmt.Sprintf("fleet %q takes its capacity from job backends, and a dev environment runs on hosts only (its SSH and IDE go through gpud's agent)", bf.name),
			Instead: "name a fleet of hosts"}
	}
	have := fc.srv.projectBackends(bf.project)
	if !slices.ContainsFunc(bf.entries, func(e string) bool { return len(selected(have, e)) > 0 }) {
		return &refusal{Why: fmt.Sprintf("fleet %q takes its capacity from %s, and project %q has no such backend now (deleted?)",
			bf.name, strings.Join(bf.entries, ", "), bf.project),
			Instead: "add the backend again with `gpud backend add`, or apply the fleet with backends the project has (gpud backend list)"}
	}
	return nil
}

// placedBackendOffer reports whether a run (spec rs) of project may use
// backend offer o, and through which of its fleets ("" when it names
// none): the offer's backend must have capacity nodes the run's placement,
// targets and host needs allow, as the scheduler would judge them.
func (s *Server) placedBackendOffer(project string, rs runState, req taskRequest, o api.Offer) (string, bool) {
	if rs.Type == api.KindDevEnvironment {
		return "", false
	}
	if m := int64(o.Resources.GPUMemory); req.GPU > 0 && (m < req.GPUMemory || req.GPUMemoryMax > 0 && m > req.GPUMemoryMax) {
		return "", false
	}
	nodes := s.backendCapacityNodes() // copies
	i := slices.IndexFunc(nodes, func(n sched.Node) bool {
		return n.Labels[projectLabel] == project && n.Labels[backendNameLabel] == o.Backend
	})
	if i < 0 {
		// No capacity of that backend: an instance backend's offer is
		// one a fleet of the run would provision (fleet_autoscale_offers.go).
		return s.autoscaledOfferFleet(project, rs, req, o)
	}
	n := nodes[i]
	n.Devices = nil
	for d := range int(o.Resources.GPUs) {
		n.Devices = append(n.Devices, sched.Device{Index: d, Name: gpuModel(o.Resources.GPUName)})
	}
	for _, sel := range rs.Targets.selector() {
		if !selects(sel, n) {
			return "", false
		}
	}
	var needs []hostNeeds
	if req.Needs != (hostNeeds{}) {
		needs = append(needs, req.Needs)
	}
	if !backendNodeMatches(n, project, rs.Place, needs) {
		return "", false
	}
	for _, f := range rs.Place.Fleets {
		if n.Labels[fleetNodeLabel(f)] == "yes" {
			return f, true
		}
	}
	return "", true
}

// selects reports whether sel (a label and its values, no nesting) selects
// node n, as sched does.
func selects(sel sched.NodeSelector, n sched.Node) bool {
	return sel.Key == "" || slices.Contains(sel.Values, n.Labels[sel.Key])
}
