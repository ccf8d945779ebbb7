package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/daemon"
)

// TestFleetCommandListsHostsAndManagesRegistrationTokens runs `gpud fleet`
// against a real server: list shows the local host with its GPUs, token
// issues a registration token once, revoke revokes it, delete deletes.
func TestFleetCommandListsHostsAndManagesRegistrationTokens(t *testing.T) {
	ctx := context.Background()
	srv := serveForCLI(t, daemon.Options{FakeGPUs: "2xH100:80GB", Runtime: "process", RegistrationListen: "127.0.0.1:0"})
	cl, err := api.NewClient(srv.URL(), srv.AdminToken(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.ApplyFleet(ctx, "main", api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: metal\nnodes: 0..4\n"}); err != nil {
		t.Fatal(err)
	}
	gpud := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run(append([]string{"gpud"}, args...), &out, &errOut); code != 0 {
			t.Fatalf("gpud %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
		}
		return out.String()
	}

	list := gpud("fleet", "list")
	if !regexp.MustCompile(`(?m)^local\s+\S+\s+local\s+idle\s+2×H100:80GB\s+2\s`).MatchString(list) || !strings.Contains(list, "metal") {
		t.Errorf("fleet list:\n%s\nwant the local host with 2×H100:80GB, 2 free, and the empty metal fleet", list)
	}
	issued := gpud("fleet", "token", "metal")
	m := regexp.MustCompile(`gpud fleet revoke metal (\S+)`).FindStringSubmatch(issued)
	if m == nil || !strings.Contains(issued, "gpudreg_") {
		t.Fatalf("fleet token output:\n%s\nwant the token and how to revoke it", issued)
	}
	if out := gpud("fleet", "revoke", "metal", m[1]); !strings.Contains(out, "revoked") {
		t.Errorf("fleet revoke: %q", out)
	}
	gpud("fleet", "delete", "metal")
	var fleets []api.Fleet
	if err := json.Unmarshal([]byte(gpud("fleet", "list", "--json")), &fleets); err != nil || len(fleets) != 1 || fleets[0].Name != "local" {
		t.Errorf("fleets after delete: %+v, %v; want only local", fleets, err)
	}
}
