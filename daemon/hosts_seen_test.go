package daemon

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestHostSeenAndFreeDiskComeFromItsLastAnswer: the server asks its
// hosts' agents every resync interval, so a host's last-seen time moves
// past its registration while it answers, and it (and its offer) shows
// the disk space free, not the disk's size; an owned host's offer is
// marked owned, with no price.
func TestHostSeenAndFreeDiskComeFromItsLastAnswer(t *testing.T) {
	ts := startServer(t, "1xH100:80GB")
	instance := func() api.Instance {
		var insts []api.Instance
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/instances", nil, &insts)
		if len(insts) != 1 {
			t.Fatalf("instances: %+v", insts)
		}
		return insts[0]
	}
	first := instance()
	if first.LastHeartbeat.IsZero() {
		t.Fatal("the local host was never seen")
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if in := instance(); !in.LastHeartbeat.After(first.LastHeartbeat) {
			return fmt.Errorf("last seen still %s", in.LastHeartbeat)
		}
		return nil
	})
	in := instance()
	if in.Free.Disk <= 0 || in.Free.Disk >= in.Resources.Disk {
		t.Errorf("free disk %d of %d: want what is free, under the disk's size", in.Free.Disk, in.Resources.Disk)
	}
	var offers []api.Offer
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/offers", nil, &offers)
	if len(offers) != 1 {
		t.Fatalf("offers: %+v", offers)
	}
	if o := offers[0]; !o.Owned || o.Price != 0 || o.Resources.Disk != in.Free.Disk {
		t.Errorf("own host's offer %+v: want owned, no price, disk %d free", o, in.Free.Disk)
	}
}
