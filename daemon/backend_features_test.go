package daemon

import (
	"slices"
	"testing"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/sched"
)

// TestBackendFeaturesSelectNodes: a backend node carries a yes/no label
// per feature its backend advertises; a feature's selector takes hosts
// (no label) and the backends that advertise it; a privileged job goes
// only to a backend that advertises privileged; a service may use only
// the backends that advertise service, a dev environment none; and a
// backend lacking a needed feature is named with it.
func TestBackendFeaturesSelectNodes(t *testing.T) {
	with := map[string]string{backendLabel: jobBackendLabel, projectLabel: "main", backendTypeLabel: "kubernetes", backendNameLabel: "k8s"}
	featureLabels(with, plugins.Info{Features: []string{plugins.FeaturePrivileged, plugins.FeatureShmSize}})
	without := map[string]string{backendLabel: jobBackendLabel, projectLabel: "main", backendTypeLabel: "test", backendNameLabel: "lab"}
	featureLabels(without, plugins.Info{}) // an older plugin: no list, no features
	yes, no := sched.Node{Name: "backend:main/k8s/x", Labels: with}, sched.Node{Name: "backend:main/lab/x", Labels: without}
	host := sched.Node{Name: "h", Labels: map[string]string{backendLabel: "local"}}
	sel := featureSelector(plugins.FeatureShmSize)
	for _, c := range []struct {
		n    sched.Node
		want bool
	}{{yes, true}, {no, false}, {host, true}} {
		if got := slices.Contains(sel.Values, c.n.Labels[sel.Key]); got != c.want {
			t.Errorf("%s under %s: %v, want %v", c.n.Name, sel.Key, got, c.want)
		}
	}
	priv := []hostNeeds{{Privileged: true}}
	if !backendNodeMatches(yes, "main", runPlacement{}, priv) || backendNodeMatches(no, "main", runPlacement{}, priv) {
		t.Error("a privileged job must go only to the backend that advertises privileged")
	}
	all := []jobBackendView{{name: "k8s", typ: "kubernetes", features: []string{plugins.FeatureService}}, {name: "lab", typ: "test"}}
	if got := runBackends(api.KindService, all); len(got) != 1 || got[0].name != "k8s" {
		t.Errorf("a service's backends: %+v", got)
	}
	if got := runBackends(api.KindTask, all); len(got) != 2 {
		t.Errorf("a task's backends: %+v", got)
	}
	if got := runBackends(api.KindDevEnvironment, all); len(got) != 0 {
		t.Errorf("a dev environment's backends: %+v", got)
	}
	lacking, feature := all[1].lacks(map[string][]string{plugins.FeatureShmSize: {"resources.shm_size"}})
	if len(lacking) != 1 || feature["resources.shm_size"] != plugins.FeatureShmSize || all[1].where(plugins.FeatureShmSize) != "the job backend lab (test), which does not advertise shm_size" {
		t.Errorf("lacks: %v %v", lacking, feature)
	}
}
