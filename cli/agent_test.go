package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
)

func TestAgentInventory(t *testing.T) {
	testCLICases(t, []cliCase{
		{name: "json dump reports the host and every fake device", args: []string{"agent", "inventory", "--json", "--fake-gpus", "2xA100:40GB"},
			check: func(t *testing.T, out string) {
				var h api.HostInfo
				if err := json.Unmarshal([]byte(out), &h); err != nil {
					t.Fatalf("not JSON: %v\n%s", err, out)
				}
				if h.CPUs < 1 || h.Memory <= 0 || h.Accelerators.Source != "fake" || len(h.Accelerators.Devices) != 2 || len(h.Accelerators.Links) != 2 {
					t.Fatalf("inventory = %+v", h)
				}
			}},
		{name: "text dump lists devices and topology", args: []string{"agent", "inventory", "--fake-gpus", "8xH100:80GB"},
			stdout: "gpus      8 from fake", check: func(t *testing.T, out string) {
				if !strings.Contains(out, "H100") || !strings.Contains(out, "topology") {
					t.Fatalf("output:\n%s", out)
				}
			}},
		{name: "a malformed fake spec is invalid input", args: []string{"agent", "inventory", "--fake-gpus", "8xH100:lots"}, code: exitInvalidInput},
		{name: "the shim needs its job directory", args: []string{"agent", "shim"}, code: exitUsage},
	})
}
