package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
)

// A Kubernetes volume's row names its claim (registered or not), its
// backend's type and the claim's phase.
func TestVolumeListShowsAClaim(t *testing.T) {
	now := time.Now()
	var b bytes.Buffer
	err := printVolumes(&b, []api.Volume{
		{Name: "data", Backend: "k8s", BackendType: "kubernetes", Claim: "gpud-vol-main-data-1f3", Status: "active", State: "Bound", Size: 100 * api.GB, Used: -1, Runs: []string{"train"}, CreatedAt: now},
		{Name: "sets", Backend: "kubernetes", BackendType: "kubernetes", Claim: "shared", Registered: true, Status: "active", State: "Pending", Used: -1, CreatedAt: now},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, w := range []string{"HOST/CLAIM", "k8s (kubernetes)", "claim gpud-vol-main-data-1f3", "active (Bound)", "100GB", "train", "claim shared (registered)", "active (Pending)"} {
		if !strings.Contains(out, w) {
			t.Errorf("volume list lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "kubernetes (kubernetes)") {
		t.Errorf("a backend named after its type is named twice:\n%s", out)
	}
}
