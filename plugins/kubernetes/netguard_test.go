package kubernetes

import (
	"context"
	"os"
	"strings"
	"testing"
)

// deny_server_network (set by the server on a project admin's backend):
// the plugin's connections refuse the server's own addresses once
// resolved, so the test cluster's API server on 127.0.0.1, which the
// same kubeconfig reaches without it, is refused by name.
func TestDenyServerNetworkRefusesTheServersOwnAddressAtTheConnection(t *testing.T) {
	b, c := newBackend(t) // reaches the cluster without the guard
	data, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	guarded, err := New(Config{KubeconfigData: string(data), Namespace: b.Namespace(), DenyServerNetwork: true})
	if err != nil {
		t.Fatal(err)
	}
	err = guarded.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "loopback") || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("Check through the guard: %v, want a refusal of the loopback address", err)
	}
}
