package daemon

import (
	"context"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// A stored instance whose spec cannot be decoded is not read as one of
// backend "": registering a host under its id is refused with the decode
// error, which names the record, instead of a take-over reason that
// misstates what the id belongs to.
func TestRegisteringOverAnUndecodableInstanceSaysTheRecordIsCorrupt(t *testing.T) {
	ts := startServer(t, "")
	ctx := context.Background()
	bad := store.Record{Kind: store.KindInstance, ID: "reg-corrupt", Name: "reg-corrupt", Fleet: localFleet,
		Status: store.InstanceIdle, Spec: []byte(`{"backend": 5}`)}
	if _, err := ts.store.Apply(ctx, store.Put(bad)); err != nil {
		t.Fatal(err)
	}
	err := ts.hosts.registerInstance(ctx, localFleet, "reg-corrupt", "remote", api.HostInfo{Hostname: "h"}, nil)
	if err == nil || !strings.Contains(err.Error(), "stored instance") || strings.Contains(err.Error(), "belongs to") {
		t.Fatalf("register over a corrupt instance: %v; want the decode error", err)
	}
}
