package daemon

import (
	"maps"
	"slices"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/sched"
)

// Job fields per backend type (issue 17, docs/backends.md "What each
// backend supports"): a job backend advertises in plugins.Info.Features
// the fields it honours beyond what every backend does (the Kubernetes
// backend: shm_size, and privileged where its configuration allows it).
// A field rule whose backend refusal names a feature (refusal.Unless) is
// refused only on backends that do not advertise it: the run is kept off
// their capacity (a label per feature on every backend node), and refused,
// naming each backend and the feature it lacks, when no host or backend
// is left.

// backendFeatures are the features the server knows to ask about; each
// backend node carries a label per feature, "yes" or "no" (hosts none).
var backendFeatures = []string{plugins.FeaturePrivileged, plugins.FeatureShmSize, plugins.FeaturePorts, plugins.FeatureService, plugins.FeatureVolumes, plugins.FeatureImage}

// featureLabel is the node label that says whether a backend node's
// backend advertises feature f.
func featureLabel(f string) string { return "backend-feature-" + f }

// featureLabels are the feature labels of a backend with info.
func featureLabels(labels map[string]string, info plugins.Info) {
	for _, f := range backendFeatures {
		labels[featureLabel(f)] = "no"
		if info.Supports(f) {
			labels[featureLabel(f)] = "yes"
		}
	}
}

// featureSelector keeps a job on hosts (which have no feature labels) and
// on backend nodes whose backend advertises f.
func featureSelector(f string) sched.NodeSelector {
	return sched.NodeSelector{Key: featureLabel(f), Values: []string{"", "yes"}, Name: "hosts or job backends that advertise " + f}
}

// nodeHasFeature reports whether backend node n's backend advertises f.
func nodeHasFeature(n sched.Node, f string) bool { return n.Labels[featureLabel(f)] == "yes" }

// jobBackendView is one of a project's job backends as the field rules
// see it: its name, type and the features it advertises.
type jobBackendView struct {
	name, typ string
	features  []string
}

// jobBackendViews lists project's job backends with capacity, by name.
func (s *Server) jobBackendViews(project string) []jobBackendView {
	s.refreshBackendCapacity(s.ctx, false)
	var out []jobBackendView
	for _, n := range s.backendCapacityNodes() {
		if n.Labels[projectLabel] != project || slices.ContainsFunc(out, func(v jobBackendView) bool { return v.name == n.Labels[backendNameLabel] }) {
			continue
		}
		v := jobBackendView{name: n.Labels[backendNameLabel], typ: n.Labels[backendTypeLabel]}
		for _, f := range backendFeatures {
			if nodeHasFeature(n, f) {
				v.features = append(v.features, f)
			}
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b jobBackendView) int { return strings.Compare(a.name, b.name) })
	return out
}

// backendSupports reports whether any job backend the run may use
// advertises feature f.
func (fc *fieldCheck) backendSupports(f string) bool {
	return fc.jobBackends && slices.ContainsFunc(fc.backends, func(v jobBackendView) bool { return slices.Contains(v.features, f) })
}

// backendLacks lists, of the fields needing a feature (feature -> paths),
// those backend v does not honour.
func (v jobBackendView) lacks(need map[string][]string) (paths []string, feature map[string]string) {
	feature = map[string]string{}
	for _, f := range slices.Sorted(maps.Keys(need)) {
		if slices.Contains(v.features, f) {
			continue
		}
		for _, p := range need[f] {
			paths = append(paths, p)
			feature[p] = f
		}
	}
	return paths, feature
}

// backendWhere names backend v, lacking feature f, in a refusal.
func (v jobBackendView) where(f string) string {
	return "the job backend " + v.name + " (" + v.typ + "), which does not advertise " + f
}

// runBackends are the job backends a run of kind may use: all for a
// task, those that advertise service for a service, none for a dev
// environment (its SSH and IDE go through gpud's agent).
func runBackends(kind api.Kind, all []jobBackendView) []jobBackendView {
	switch kind {
	case api.KindTask:
		return all
	case api.KindService:
		var out []jobBackendView
		for _, v := range all {
			if slices.Contains(v.features, plugins.FeatureService) {
				out = append(out, v)
			}
		}
		return out
	}
	return nil
}
