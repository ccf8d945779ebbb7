package kubernetes

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNamesAreValidAndDistinct(t *testing.T) {
	ids := []string{"run-1", "Run_1", "run/1", strings.Repeat("x", 200), strings.Repeat("x", 201), "---", ""}
	seen := map[string]string{}
	for _, id := range ids {
		base := gangBase(id)
		if errs := validation.IsDNS1123Label(podHost(base, 127)); len(errs) > 0 {
			t.Errorf("%q -> %q: %v", id, base, errs)
		}
		if errs := validation.IsValidLabelValue(labelValue(id)); len(errs) > 0 {
			t.Errorf("label of %q: %v", id, errs)
		}
		if other, ok := seen[base]; ok {
			t.Errorf("%q and %q share %q", id, other, base)
		}
		seen[base] = id
	}
	if gangBase("run-1") != "gpud-run-1" {
		t.Errorf("a valid id is kept: %q", gangBase("run-1"))
	}
}

func TestGPUNameMatching(t *testing.T) {
	for _, c := range []struct {
		model, want string
		ok          bool
	}{{"H100", "H100", true}, {"H100", "nvidia h100 80gb hbm3", true}, {"H100", "A100,H100", true},
		{"H100", "A100", false}, {"H100", "H10", false}, {"H100", "", false}} {
		if got := gpuNameMatches(c.model, c.want); got != c.ok {
			t.Errorf("%q ~ %q = %v", c.model, c.want, got)
		}
	}
}

func TestGPUModelFromTheProductLabel(t *testing.T) {
	for product, want := range map[string]string{"NVIDIA-H100-80GB-HBM3": "H100", "NVIDIA-A100-SXM4-80GB": "A100", "Tesla-T4": "T4", "AMD-Instinct-MI300X": "MI300X", "": ""} {
		if got := gpuModel(product); got != want {
			t.Errorf("gpuModel(%q) = %q, want %q", product, got, want)
		}
	}
}
