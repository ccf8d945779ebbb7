package daemon

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/sched"
	"gpud.dev/gpud/store"
)

// This file holds the honest-configuration contract (DESIGN.md §12): every
// field a configuration sets either takes effect on the target that runs
// the job, or the plan refuses it, naming the field, the target and what
// to do instead. The rules live in the fields_rules_*.go tables, one per
// area; fields_test.go walks the spec types by reflection and fails for a
// field without a rule, and for an honoured field whose proof (an e2e
// test) does not exist.

// fieldTarget is where a job can run: a runtime (process, docker) or a
// kind of host (local, ssh, registered). A job runs on one of each.
type fieldTarget string

const (
	targetProcess    fieldTarget = "process"    // the process runtime, or an image-less job on a mixed host
	targetDocker     fieldTarget = "docker"     // a Docker container
	targetLocal      fieldTarget = "local"      // the server's own host (the shared local fleet)
	targetSSH        fieldTarget = "ssh"        // a host of an SSH fleet
	targetRegistered fieldTarget = "registered" // a host registered with a fleet's token
	targetBackend    fieldTarget = "backend"    // a job backend's engine (Kubernetes, Slurm): backend_capacity.go
)

// fieldTargets lists the targets in the order docs/config.md shows them.
func fieldTargets() []fieldTarget {
	return []fieldTarget{targetProcess, targetDocker, targetLocal, targetSSH, targetRegistered, targetBackend}
}

// runtimeTarget reports whether t is a runtime (else a kind of host).
func runtimeTarget(t fieldTarget) bool { return t == targetProcess || t == targetDocker }

// refusal is why gpud cannot honour a field, and what to do instead.
type refusal struct {
	Why     string
	Instead string
	// Unless, on the backend target, names the feature (plugins.Feature*)
	// that lifts the refusal on the job backends that advertise it
	// (backend_features.go).
	Unless string
}

// fieldRule is what gpud does with one configuration field.
type fieldRule struct {
	// Proof names the end-to-end tests ("package.TestName") that show the
	// field's effect from inside a job, on the targets it is not refused on.
	Proof []string
	// All refuses the field (and every field below it) on every target,
	// until the subsystem that honours it is built.
	All *refusal
	// Refuse lists the targets that cannot honour the field: a run that
	// sets it is kept off them, and refused when no host it may use is
	// left.
	Refuse map[fieldTarget]refusal
	// RefuseWhen, when set, narrows Refuse to the values it reports true
	// for (an absolute upload target, not a relative one).
	RefuseWhen func(fc *fieldCheck, path string) bool
	// Subtree makes the rule cover every field below this one.
	Subtree bool
	// Check refuses values of the field that nothing honours (nil: every
	// value is honoured where the field is).
	Check func(fc *fieldCheck, path string) *refusal
	// Note says, in the plan, what gpud does differently from a dstack
	// server for this field (empty: nothing).
	Note func(fc *fieldCheck) string
}

// fieldRules maps a field's path to its rule. A key "kind:path" holds for
// that kind only and wins over a plain "path", which holds for the fields
// every run kind shares.
type fieldRules map[string]fieldRule

var rules = mergeRules(runRules, containerRules, placementRules, lifecycleRules, serviceRules, routerRules, otherKindRules, managedVolumeRules)

func mergeRules(tables ...fieldRules) fieldRules {
	out := fieldRules{}
	for _, t := range tables {
		for k, r := range t {
			if _, dup := out[k]; dup {
				panic("daemon: two field rules for " + k)
			}
			out[k] = r
		}
	}
	return out
}

// runKind reports whether k is a kind whose fields share the plain rules.
func runKind(k api.Kind) bool {
	return k == api.KindTask || k == api.KindService || k == api.KindDevEnvironment
}

// ruleFor finds the rule of the field at path (without indices) of kind
// k: its own, or a parent's that covers it (Subtree or All). ok is false
// when no rule covers the field.
func ruleFor(k api.Kind, path string) (r fieldRule, at string, ok bool) {
	// A task group's or replica group's resources follow the run's rules:
	// they reach the scheduler the same way.
	for _, group := range []string{"groups.resources", "replicas.resources"} {
		if rest, found := strings.CutPrefix(path, group); found && (rest == "" || rest[0] == '.') {
			r, at, ok := ruleFor(k, "resources"+rest)
			return r, at, ok
		}
	}
	own := true
	for p := path; p != ""; p = parentPath(p) {
		for _, key := range []string{string(k) + ":" + p, p} {
			if key == p && !runKind(k) {
				continue
			}
			if r, ok := rules[key]; ok && (own || r.Subtree || r.All != nil) {
				return r, p, true
			}
		}
		own = false
	}
	if r, ok := rules[string(k)+":"]; ok && r.All != nil {
		return r, "", true // the whole kind
	}
	return fieldRule{}, "", false
}

func parentPath(p string) string {
	i := strings.LastIndexByte(p, '.')
	if i < 0 {
		return ""
	}
	return p[:i]
}

// candidateHost is a host a run may be placed on, as the field rules see it.
type candidateHost struct {
	id, fleet, fleetName string
	backend              fieldTarget
	runtime              string // the host's runtime: docker, process, docker+process (none: Docker unreachable)
	info                 api.HostInfo
}

// fieldCheck is what the rules see of a run being planned.
type fieldCheck struct {
	srv     *Server
	project string
	cfg     *api.Config
	run     *api.RunSpec
	// image is whether the run's jobs get an image (their own, or the
	// server's default image): on a mixed host they then run in Docker.
	image bool
	// hosts are the hosts of the project's fleets and the shared ones.
	hosts []candidateHost
	// jobBackends: the project has job backend capacity (a task may run
	// there: the Docker runtime and the backend target).
	jobBackends bool
	// backends are the project's job backends (when jobBackends).
	backends []jobBackendView
}

// runTargets is what the honoured fields leave of the runtimes and host
// kinds a run may use; empty lists mean any.
type runTargets struct {
	Runtimes []string `json:"runtimes,omitempty"` // runtime labels: docker, process, docker+process
	Backends []string `json:"backends,omitempty"` // instance backends: local, ssh, registration, remote
	// Features are the job backend features the run needs where it runs
	// on a job backend (backend_features.go).
	Features []string `json:"features,omitempty"`
}

// selector is the scheduler's view of t: the nodes whose labels allow it.
func (t runTargets) selector() []sched.NodeSelector {
	var out []sched.NodeSelector
	if len(t.Runtimes) > 0 {
		out = append(out, sched.NodeSelector{Key: runtimeLabel, Values: t.Runtimes})
	}
	if len(t.Backends) > 0 {
		out = append(out, sched.NodeSelector{Key: backendLabel, Values: t.Backends})
	}
	for _, f := range t.Features {
		out = append(out, featureSelector(f))
	}
	return out
}

// mixedRuntime is the name a host running Docker and process jobs side by
// side reports (agent/runtime/mixed).
const mixedRuntime = "docker+process"

// Node labels the field rules select on.
const (
	runtimeLabel = "runtime"
	backendLabel = "backend"
)

// backendTarget maps an instance's backend to its target.
func backendTarget(backend string) fieldTarget {
	switch backend {
	case "local":
		return targetLocal
	case "ssh":
		return targetSSH
	case jobBackendLabel:
		return targetBackend
	}
	return targetRegistered
}

// runtimeOf is the target a job runs on on a host with runtime rt.
func runtimeOf(rt string, image bool) fieldTarget {
	switch rt {
	case "process":
		return targetProcess
	case mixedRuntime:
		if !image {
			return targetProcess
		}
	}
	return targetDocker
}

// fieldVerdict is the outcome of checking a run's fields.
type fieldVerdict struct {
	targets runTargets
	notes   []string
}

// checkRunFields applies the field rules to a run configuration: a field
// refused everywhere, or on every host the run may use, is an error
// naming it; fields refused on some targets keep the run off them.
func (s *Server) checkRunFields(project string, cfg *api.Config) (fieldVerdict, error) {
	if cfg.Run() == nil {
		return fieldVerdict{}, nil // not a run: buildRun answers that
	}
	fc := &fieldCheck{srv: s, project: project, cfg: cfg, run: cfg.Run()}
	fc.image = fc.run.Image != "" || fc.run.Docker || (!s.opts.Embedded && s.opts.DefaultImage != "")
	fc.hosts = s.candidateHosts(project)
	fc.backends = runBackends(fc.run.Type, s.jobBackendViews(project)) // backend_features.go
	fc.jobBackends = len(fc.backends) > 0
	var v fieldVerdict
	var errs api.ErrorList
	refused := map[fieldTarget][]string{} // target -> the fields that exclude it
	need := map[string][]string{}         // backend feature -> the fields that need it
	why := map[string]refusal{}           // "field/target" -> the reason
	var done []string                     // fields refused whole: their children are covered
	for _, p := range api.SetFields(cfg) {
		if slices.ContainsFunc(done, func(d string) bool { return strings.HasPrefix(p, d+".") || strings.HasPrefix(p, d+"[") }) {
			continue
		}
		key := api.StripIndex(p)
		r, _, ok := ruleFor(cfg.Kind, key)
		if !ok {
			errs = append(errs, cfg.At(p, "gpud has no rule for this field, so it would not take effect", "drop it, and report this as a bug"))
			done = append(done, p)
			continue
		}
		if r.All != nil {
			errs = append(errs, refusedError(cfg, p, "", *r.All))
			done = append(done, p)
			continue
		}
		if r.Check != nil {
			if rf := r.Check(fc, p); rf != nil {
				errs = append(errs, refusedError(cfg, p, "", *rf))
				done = append(done, p)
				continue
			}
		}
		for _, t := range slices.Sorted(maps.Keys(r.Refuse)) {
			if !slices.Contains(refused[t], p) && (r.RefuseWhen == nil || r.RefuseWhen(fc, p)) {
				if f := r.Refuse[t].Unless; t == targetBackend && f != "" {
					if !slices.Contains(need[f], p) {
						need[f] = append(need[f], p)
					}
					why[p+"/"+string(t)] = r.Refuse[t]
					continue
				}
				refused[t] = append(refused[t], p)
				why[p+"/"+string(t)] = r.Refuse[t]
			}
		}
		if r.Note != nil {
			if n := r.Note(fc); n != "" && !slices.Contains(v.notes, n) {
				v.notes = append(v.notes, n)
			}
		}
	}
	if len(errs) > 0 {
		return v, byLine(errs)
	}
	v.targets = allowedTargets(refused, fc.image)
	v.targets.Features = slices.Sorted(maps.Keys(need))
	if n := processNote(fc); n != "" {
		v.notes = append(v.notes, n)
	}
	if (len(fc.hosts) == 0 && !fc.jobBackends) || (len(refused) == 0 && len(need) == 0) {
		return v, nil
	}
	// Some targets are excluded: refuse a run that no host (or job
	// backend) it may use can take, naming what excludes each kind.
	kinds := make([][2]fieldTarget, 0, len(fc.hosts)+1)
	for _, h := range fc.hosts {
		kinds = append(kinds, [2]fieldTarget{runtimeOf(h.runtime, fc.image), h.backend})
	}
	if fc.jobBackends {
		kinds = append(kinds, [2]fieldTarget{targetDocker, targetBackend})
	}
	for _, k := range kinds {
		if len(refused[k[0]]) == 0 && len(refused[k[1]]) == 0 && (k[1] != targetBackend || len(need) == 0) {
			return v, nil
		}
	}
	if fc.jobBackends && len(refused[targetDocker]) == 0 && len(refused[targetBackend]) == 0 {
		for _, b := range fc.backends {
			if lacking, _ := b.lacks(need); len(lacking) == 0 {
				return v, nil
			}
		}
	}
	seen := map[string]bool{}
	for _, k := range kinds {
		for _, t := range k {
			for _, p := range refused[t] {
				if !seen[p+"/"+string(t)] {
					seen[p+"/"+string(t)] = true
					errs = append(errs, refusedError(cfg, p, targetName(t), why[p+"/"+string(t)]))
				}
			}
		}
	}
	if fc.jobBackends {
		for _, b := range fc.backends {
			lacking, feature := b.lacks(need)
			for _, p := range lacking {
				errs = append(errs, refusedError(cfg, p, b.where(feature[p]), why[p+"/"+string(targetBackend)]))
			}
		}
	}
	return v, byLine(errs)
}

// checkKindFields applies the field rules to a configuration that is not
// a run (fleets, queues): there are no targets to choose, so a field is
// honoured or refused outright. where gives the server and project a
// value-dependent Check may consult (a fleet's backends).
func checkKindFields(cfg *api.Config, where ...fieldCheck) api.ErrorList {
	kc := fieldCheck{cfg: cfg}
	if len(where) > 0 {
		kc.srv, kc.project = where[0].srv, where[0].project
	}
	if r, ok := rules[string(cfg.Kind)+":"]; ok && r.All != nil {
		return api.ErrorList{refusedError(cfg, "type", "", *r.All)} // the whole kind
	}
	var errs api.ErrorList
	var done []string
	for _, p := range api.SetFields(cfg) {
		if slices.ContainsFunc(done, func(d string) bool { return strings.HasPrefix(p, d+".") || strings.HasPrefix(p, d+"[") }) {
			continue
		}
		r, _, ok := ruleFor(cfg.Kind, api.StripIndex(p))
		switch {
		case !ok:
			errs = append(errs, cfg.At(p, "gpud has no rule for this field, so it would not take effect", "drop it, and report this as a bug"))
		case r.All != nil:
			errs = append(errs, refusedError(cfg, p, "", *r.All))
		case r.Check != nil:
			if rf := r.Check(&kc, p); rf != nil {
				errs = append(errs, refusedError(cfg, p, "", *rf))
			} else {
				continue
			}
		default:
			continue
		}
		done = append(done, p)
	}
	return byLine(errs)
}

// processNote says, in the plan, when the run's jobs will be host
// processes rather than containers of dstack's default image: in the
// embedded laptop mode, or where every host runs the process runtime.
func processNote(fc *fieldCheck) string {
	if fc.run.Image != "" {
		return ""
	}
	processes := !fc.image
	if len(fc.hosts) > 0 && fc.image {
		processes = true
		for _, h := range fc.hosts {
			if runtimeOf(h.runtime, fc.image) != targetProcess {
				processes = false
			}
		}
	}
	if !processes {
		return ""
	}
	return "no image: the jobs run as processes on the host (the process runtime), not in dstack's default container image; set image to run in a container"
}

// allowedTargets turns the refused targets into the labels a run's nodes
// must carry.
func allowedTargets(refused map[fieldTarget][]string, image bool) runTargets {
	var t runTargets
	if len(refused[targetProcess]) > 0 || len(refused[targetDocker]) > 0 {
		for _, rt := range []string{"docker", "process", mixedRuntime} {
			if len(refused[runtimeOf(rt, image)]) == 0 {
				t.Runtimes = append(t.Runtimes, rt)
			}
		}
		if len(t.Runtimes) == 0 {
			t.Runtimes = []string{"none"}
		}
	}
	if len(refused[targetLocal]) > 0 || len(refused[targetSSH]) > 0 || len(refused[targetRegistered]) > 0 || len(refused[targetBackend]) > 0 {
		for _, b := range []string{"local", "ssh", "registration", "remote", jobBackendLabel} {
			if len(refused[backendTarget(b)]) == 0 {
				t.Backends = append(t.Backends, b)
			}
		}
		if len(t.Backends) == 0 {
			t.Backends = []string{"none"}
		}
	}
	return t
}

// targetName is how an error names a target.
func targetName(t fieldTarget) string {
	switch t {
	case targetProcess:
		return "the process runtime"
	case targetDocker:
		return "the Docker runtime"
	case targetLocal:
		return "the server's own host"
	case targetSSH:
		return "SSH fleet hosts"
	case targetBackend:
		return "the project's job backends"
	}
	return "registered hosts"
}

// refusedError names the refused field at its line; where is the target
// that cannot honour it ("" for every target).
func refusedError(cfg *api.Config, path, where string, r refusal) *api.Error {
	if where == "" {
		return cfg.At(path, "not honoured by gpud: "+r.Why, r.Instead)
	}
	return cfg.At(path, fmt.Sprintf("not honoured on %s, the only hosts this run may use: %s", where, r.Why), r.Instead)
}

// byLine orders errors as the file reads.
func byLine(errs api.ErrorList) api.ErrorList {
	slices.SortStableFunc(errs, func(a, b *api.Error) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
	return errs
}

// candidateHosts lists the hosts a project's runs may be placed on: its
// own fleets' and the shared fleets', with a connected agent.
func (s *Server) candidateHosts(project string) []candidateHost {
	var out []candidateHost
	for _, inst := range s.store.Instances().List() {
		if inst.Status == store.InstanceTerminated || inst.Status == store.InstanceTerminating || s.agents.get(inst.ID) == nil {
			continue
		}
		f, err := s.store.Fleets().Get(inst.Fleet)
		if err != nil || (f.Project != "" && f.Project != project) {
			continue
		}
		st, err := s.instanceSpec(inst)
		if err != nil {
			continue
		}
		out = append(out, candidateHost{id: inst.ID, fleet: inst.Fleet, fleetName: f.Name, backend: backendTarget(st.Backend),
			runtime: st.Host.Runtime, info: st.Host})
	}
	return out
}
