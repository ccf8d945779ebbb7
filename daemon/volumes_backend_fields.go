package daemon

import (
	"fmt"
	"slices"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/sched"
)

// The plan's checks of a run that mounts a backend's volume (a
// Kubernetes claim): its jobs can run only on that backend, so the plan
// refuses, by name, a run that could not be placed there (a dev
// environment, fleets or instances, a backends list without it, a
// service on a backend without services, another volume elsewhere, a
// field the backend does not honour), instead of leaving it pending.

// checkBackendVolumeRun judges the run's use of volume name, on backend
// st.BackendName.
func (fc *fieldCheck) checkBackendVolumeRun(name string, st volumeState) *refusal {
	where := fmt.Sprintf("volume %q is the claim %s of the backend %s (%s), so the jobs that mount it run only there", name, st.VolumeID, st.BackendName, st.BackendType)
	if fc.run.Type != api.KindTask && fc.run.Type != api.KindService {
		return &refusal{Why: where + ", and a " + string(fc.run.Type) + " runs on hosts only (its SSH and IDE go through gpud's agent)",
			Instead: "run a task or a service with it, or use a gpud host volume (backend: local, ssh or registered)"}
	}
	all := fc.srv.jobBackendViews(fc.project)
	if !slices.ContainsFunc(all, func(v jobBackendView) bool { return v.name == st.BackendName }) {
		return &refusal{Why: where + ", and the project has no running backend " + st.BackendName + " with capacity now (deleted, its plugin failed, or it offers nothing)",
			Instead: "see gpud backend list and gpud offer; add the backend again, or use another volume"}
	}
	if !slices.ContainsFunc(fc.backends, func(v jobBackendView) bool { return v.name == st.BackendName }) {
		return &refusal{Why: where + ", and it does not run services", Instead: "run a task with it, or use a volume of a backend that runs services"}
	}
	place := placementOf(fc.run)
	node, ok := fc.backendNode(st.BackendName)
	if ok && !backendNodeMatches(node, fc.project, place, nil) {
		return &refusal{Why: where + ", and this run's " + placementWords(place) + " keep it off that backend",
			Instead: "drop fleets and instances, or list " + st.BackendName + " in backends"}
	}
	for other, ost := range fc.runVolumeStates(nil) {
		switch {
		case other == name:
		case !ost.onBackend():
			return &refusal{Why: fmt.Sprintf("%s; volume %q is a gpud host volume, which only a host mounts", where, other),
				Instead: "mount volumes of one backend (or of hosts) in one run"}
		case ost.BackendName != st.BackendName:
			return &refusal{Why: fmt.Sprintf("%s; volume %q is on the backend %s, and a job runs on one backend", where, other, ost.BackendName),
				Instead: "mount volumes of one backend in one run"}
		}
	}
	if slices.ContainsFunc(fc.run.Volumes, func(v api.VolumeMount) bool { return v.InstancePath != "" }) {
		return &refusal{Why: where + ", and this run's instance volumes (host paths) are mounted on hosts only",
			Instead: "drop the instance volumes, or use a gpud host volume"}
	}
	if off := fc.fieldsOffBackend(st.BackendName); len(off) > 0 {
		return &refusal{Why: where + ", which does not honour " + strings.Join(off, "; "),
			Instead: "drop those fields, or use a gpud host volume (backend: local, ssh or registered)"}
	}
	return nil
}

// lookupRule is ruleFor, reached through a variable: the rules' checks
// that read other rules would otherwise make the rules table refer to
// itself while it is initialized.
var lookupRule func(api.Kind, string) (fieldRule, string, bool)

func init() { lookupRule = ruleFor }

// backendNode is one capacity node of the project's backend name.
func (fc *fieldCheck) backendNode(name string) (sched.Node, bool) {
	for _, n := range fc.srv.backendCapacityNodes() {
		if n.Labels[projectLabel] == fc.project && n.Labels[backendNameLabel] == name {
			return n, true
		}
	}
	return sched.Node{}, false
}

// placementWords names the placement fields p sets.
func placementWords(p runPlacement) string {
	var parts []string
	if len(p.Fleets) > 0 {
		parts = append(parts, "fleets")
	}
	if len(p.Instances) > 0 {
		parts = append(parts, "instances")
	}
	if len(p.Backends) > 0 {
		parts = append(parts, "backends ("+strings.Join(p.Backends, ", ")+")")
	}
	return strings.Join(parts, " and ")
}

// fieldsOffBackend lists the run's fields (with why) that the job backend
// name does not honour: the rules' refusals on the backend target (and on
// the Docker runtime, which backend jobs count as), less those lifted by
// a feature the backend advertises.
func (fc *fieldCheck) fieldsOffBackend(name string) []string {
	var view jobBackendView
	for _, v := range fc.backends {
		if v.name == name {
			view = v
		}
	}
	var out []string
	for _, p := range api.SetFields(fc.cfg) {
		r, _, ok := lookupRule(fc.cfg.Kind, api.StripIndex(p))
		if !ok || r.All != nil {
			continue // refused outright, by its own rule
		}
		for _, t := range []fieldTarget{targetBackend, targetDocker} {
			rf, refused := r.Refuse[t]
			if !refused || (r.RefuseWhen != nil && !r.RefuseWhen(fc, p)) || (rf.Unless != "" && slices.Contains(view.features, rf.Unless)) {
				continue
			}
			out = append(out, p+" ("+rf.Why+")")
			break
		}
	}
	return out
}
