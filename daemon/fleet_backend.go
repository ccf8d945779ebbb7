package daemon

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/sched"
	"gpud.dev/gpud/store"
)

// Backend fleets (issue 17 scope 2, docs/backends.md "Backend fleets"): a
// fleet `{type: fleet, backends: [TYPE or NAME...], nodes: 0..N}` takes its
// capacity from the project's job backends it names, not from hosts. Each
// job backend capacity node (backend_capacity.go) carries, per cycle, the
// label gpud.fleet/NAME of every backend fleet of its project that names
// its backend's type or name; a run's `fleets:` selects those nodes as it
// selects a host fleet's hosts (backendNodeMatches). nodes max caps how
// many nodes (backend jobs) the fleet's runs hold at once: a job counts
// against the first of its run's fleets that takes the node it is bound
// to, and a gang that would go over the cap is kept off the fleet's nodes
// that cycle (fleetCaps), its pending reason naming the fleet and its cap.
// Job backends create no machines, so a fleet's min and target stay 0
// (fields_rules_kinds.go); the instance backends of issue 18 will give a
// backend fleet hosts of its own.

// fleetNodeLabelPrefix starts the label a backend fleet puts on the
// capacity nodes it takes.
const fleetNodeLabelPrefix = "gpud.fleet/"

func fleetNodeLabel(name string) string { return fleetNodeLabelPrefix + name }

// backendFleet is a backend fleet as placement sees it.
type backendFleet struct {
	id, project, name string
	// backends are the configuration's entries, lower case: a backend's
	// type or name.
	backends []string
	// entries are the same as the configuration writes them.
	entries []string
	max     *int // nodes max; nil: no maximum
}

// backendFleetOf reads a fleet record as a backend fleet; ok is false for
// a host fleet (no backends), a shared fleet or an unreadable record.
func backendFleetOf(f store.Record) (backendFleet, bool) {
	if f.Project == "" {
		return backendFleet{}, false
	}
	spec := fleetConfig(f)
	if spec == nil || len(spec.Backends) == 0 {
		return backendFleet{}, false
	}
	bf := backendFleet{id: f.ID, project: f.Project, name: f.Name, entries: slices.Clone(spec.Backends)}
	for _, b := range spec.Backends {
		bf.backends = append(bf.backends, strings.ToLower(b))
	}
	if spec.Nodes != nil {
		bf.max = spec.Nodes.Max
	}
	return bf, true
}

// backendFleets lists every project's backend fleets.
func (s *Server) backendFleets() []backendFleet {
	var out []backendFleet
	for _, f := range s.store.Fleets().List() {
		if bf, ok := backendFleetOf(f); ok {
			out = append(out, bf)
		}
	}
	return out
}

// takes reports whether the fleet takes the capacity of project's backend
// of type typ named name: only its own project's backends.
func (bf backendFleet) takes(project, typ, name string) bool {
	return project == bf.project && (slices.Contains(bf.backends, strings.ToLower(typ)) || slices.Contains(bf.backends, strings.ToLower(name)))
}

// labelBackendFleets marks each backend capacity node of one cycle with
// the backend fleets that take it.
func (s *Server) labelBackendFleets(nodes []sched.Node) {
	fleets := s.backendFleets()
	if len(fleets) == 0 {
		return
	}
	for i := range nodes {
		n := &nodes[i]
		for _, bf := range fleets {
			if bf.takes(n.Labels[projectLabel], n.Labels[backendTypeLabel], n.Labels[backendNameLabel]) {
				n.Labels[fleetNodeLabel(bf.name)] = "yes"
			}
		}
	}
}

// projectBackend is one configured backend of a project (its record).
type projectBackend struct{ name, typ string }

// projectBackends lists project's configured backends, by name.
func (s *Server) projectBackends(project string) []projectBackend {
	var out []projectBackend
	for _, rec := range s.store.Backends().List() {
		if rec.Project != project {
			continue
		}
		spec, err := decodeSpec[backendSpec](rec)
		if err != nil {
			continue
		}
		out = append(out, projectBackend{name: rec.Name, typ: spec.Type})
	}
	slices.SortFunc(out, func(a, b projectBackend) int { return strings.Compare(a.name, b.name) })
	return out
}

// selected lists the names of bs that entry (a type or a name) selects.
func selected(bs []projectBackend, entry string) []string {
	var out []string
	for _, b := range bs {
		if strings.EqualFold(b.typ, entry) || strings.EqualFold(b.name, entry) {
			out = append(out, b.name)
		}
	}
	return out
}

// checkBackendFleet refuses, at apply, a fleet whose backends are not
// backends of its own project: each entry must name one by type or name.
func (s *Server) checkBackendFleet(project string, spec *api.FleetSpec) error {
	if len(spec.Backends) == 0 {
		return nil
	}
	have := s.projectBackends(project)
	var names []string
	for _, b := range have {
		names = append(names, b.name+" ("+b.typ+")")
	}
	for i, b := range spec.Backends {
		field := "configuration.backends[" + strconv.Itoa(i) + "]"
		if instanceBackends(b) != nil {
			return badField(field, "%q names gpud's own hosts, not a backend: hosts join a fleet through ssh_config or registration tokens; a backend fleet names the project's backends (gpud backend list)", b)
		}
		if len(selected(have, b)) == 0 {
			return badField(field, "no backend of type or name %q in project %q; its backends are %s: add it with `gpud backend add` first", b, project, listOr(names, "none"))
		}
	}
	return nil
}

// fleetBackendsOut is the API view of a backend fleet's entries.
func (s *Server) fleetBackendsOut(bf backendFleet) []api.FleetBackend {
	have := s.projectBackends(bf.project)
	var out []api.FleetBackend
	for _, e := range bf.entries {
		fb := api.FleetBackend{Name: e, Selects: selected(have, e)}
		if fb.Selects == nil {
			fb.Selects = []string{}
			fb.Reason = fmt.Sprintf("no backend of type or name %q in project %q (deleted?): runs of the fleet get no capacity from it", e, bf.project)
		}
		out = append(out, fb)
	}
	return out
}

// activeStatuses are the job statuses activeJob accepts.
var activeStatuses = []string{store.JobSubmitted, store.JobProvisioning, store.JobPulling, store.JobRunning, store.JobTerminating}

// fleetNodesInUse counts, per backend fleet id, the active jobs bound to
// backend capacity that count against it.
func (s *Server) fleetNodesInUse(fleets []backendFleet) map[string]int {
	out := map[string]int{}
	if len(fleets) == 0 {
		return out
	}
	types := map[string]string{}
	for _, status := range activeStatuses {
		for _, j := range s.store.Jobs().ByStatus(status) {
			if bf, ok := s.jobBackendFleet(j, fleets, types); ok {
				out[bf.id]++
			}
		}
	}
	return out
}

// jobBackendFleet is the backend fleet job j counts against: the first of
// its run's fleets that takes the backend capacity node j is bound to.
// types caches backends' types by record id.
func (s *Server) jobBackendFleet(j store.Record, fleets []backendFleet, types map[string]string) (backendFleet, bool) {
	project, name, ok := backendOfNode(j.Instance)
	if !ok || project != j.Project {
		return backendFleet{}, false
	}
	run, err := s.store.Runs().Get(j.Run)
	if err != nil {
		return backendFleet{}, false
	}
	rs, err := s.runSpec(run)
	if err != nil || len(rs.Place.Fleets) == 0 {
		return backendFleet{}, false
	}
	id := backendID(project, name)
	typ, seen := types[id]
	if !seen {
		if rec, err := s.store.Backends().Get(id); err == nil {
			if spec, err := decodeSpec[backendSpec](rec); err == nil {
				typ = spec.Type
			}
		}
		types[id] = typ
	}
	for _, f := range rs.Place.Fleets {
		for _, bf := range fleets {
			if bf.name == f && bf.takes(project, typ, name) {
				return bf, true
			}
		}
	}
	return backendFleet{}, false
}

// runsUsingFleet names the active runs of project whose fleets name
// fleet: waiting or running, they would be left without it.
func (s *Server) runsUsingFleet(project, fleet string) []string {
	var out []string
	for _, status := range activeStatuses {
		for _, j := range s.store.Jobs().ByStatus(status) {
			if j.Project != project {
				continue
			}
			run, err := s.store.Runs().Get(j.Run)
			if err != nil || slices.Contains(out, run.Name) {
				continue
			}
			if rs, err := s.runSpec(run); err == nil && slices.Contains(rs.Place.Fleets, fleet) {
				out = append(out, run.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// fleetCaps holds the backend fleets' caps for one scheduling cycle: what
// their runs hold, plus what gangs ahead in the cycle were let in for.
type fleetCaps struct {
	s      *Server
	built  bool
	fleets []backendFleet
	used   map[string]int
}

func (s *Server) newFleetCaps() *fleetCaps { return &fleetCaps{s: s} }

// gate returns the selectors that keep gang g of run (with placement
// place) off the nodes of each backend fleet it names whose cap the gang's
// waiting jobs would exceed, and reserves room in the others for this
// cycle. Gangs are let in in the order the snapshot reads them (oldest run
// first), so a later gang never overtakes the cap of an earlier one.
func (c *fleetCaps) gate(run store.Record, place runPlacement, g []store.Record) []sched.NodeSelector {
	if len(place.Fleets) == 0 {
		return nil
	}
	waiting := 0
	for _, j := range g {
		if j.Status == store.JobSubmitted && j.Instance == "" {
			waiting++
		}
	}
	if waiting == 0 {
		return nil
	}
	if !c.built {
		c.fleets, c.built = c.s.backendFleets(), true
		c.used = c.s.fleetNodesInUse(c.fleets)
	}
	var out []sched.NodeSelector
	for _, name := range place.Fleets {
		i := slices.IndexFunc(c.fleets, func(bf backendFleet) bool { return bf.project == run.Project && bf.name == name })
		if i < 0 || c.fleets[i].max == nil {
			continue
		}
		bf := c.fleets[i]
		if used := c.used[bf.id]; used+waiting > *bf.max {
			out = append(out, sched.NodeSelector{Key: fleetNodeLabel(bf.name), Values: []string{""},
				Name: fmt.Sprintf("fleet %q below its nodes max %d (%d held by its runs or going to runs ahead; this one needs %d)", bf.name, *bf.max, used, waiting)})
			continue
		}
		c.used[bf.id] += waiting
	}
	return out
}

// fleetOutBackend fills in a backend fleet's backends and nodes in use.
func (s *Server) fleetOutBackend(out *api.Fleet, f store.Record) {
	bf, ok := backendFleetOf(f)
	if !ok {
		return
	}
	out.Backends = s.fleetBackendsOut(bf)
	out.Nodes = &api.FleetNodesUse{InUse: s.fleetNodesInUse([]backendFleet{bf})[bf.id], Max: bf.max}
	if !slices.ContainsFunc(out.Backends, func(b api.FleetBackend) bool { return len(b.Selects) > 0 }) {
		out.Status = "no backend"
	}
}
