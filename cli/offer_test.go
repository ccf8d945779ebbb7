package cli

import (
	"strings"
	"testing"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/daemon"
)

func TestOfferPricesSayOwnedOrTheBackendsPrice(t *testing.T) {
	owned := api.Offer{Backend: "local", Instance: "h1", Owned: true, Resources: api.InstanceResources{GPUs: 1, GPUName: "H100"}}
	spot := api.Offer{Backend: "aws", Price: 1.25, Spot: true, Resources: api.InstanceResources{GPUs: 1, GPUName: "H100"}}
	onDemand := api.Offer{Backend: "aws", Price: 3.5, Resources: api.InstanceResources{GPUs: 1, GPUName: "H100"}}
	unpriced := api.Offer{Backend: "kube", Resources: api.InstanceResources{GPUs: 1}}
	for _, tt := range []struct {
		o    api.Offer
		want string
	}{{owned, "owned"}, {spot, "$1.25 (spot)"}, {onDemand, "$3.5"}, {unpriced, "-"}} {
		if got := offerPrice(tt.o); got != tt.want {
			t.Errorf("offerPrice(%+v) = %q, want %q", tt.o, got, tt.want)
		}
	}
	gs := groupOffers([]api.Offer{owned, spot, onDemand, unpriced}, []string{"gpu"})
	if len(gs) != 2 {
		t.Fatalf("groups: %+v", gs)
	}
	if got := groupPrice(gs[0]); got != "owned, $1.25..$3.5" {
		t.Errorf("1×H100 group's price %q, want owned, $1.25..$3.5", got)
	}
	if got := groupPrice(gs[1]); gs[1].GPU != "1×GPU" || got != "-" {
		t.Errorf("unnamed group %q priced %q, want 1×GPU priced -", gs[1].GPU, got)
	}
}

// TestOfferShowsOwnedHostsWithFreeDisk: gpud offer on a server with its
// local host prints the host as owned, with its free disk (the server's
// TestHostSeenAndFreeDiskComeFromItsLastAnswer shows it is what is free).
func TestOfferShowsOwnedHostsWithFreeDisk(t *testing.T) {
	serveForCLI(t, daemon.Options{FakeGPUs: "1xH100:80GB", Runtime: "process"})
	out := mustRunCLI(t, "offer")
	if !strings.Contains(out, "owned") || strings.Contains(out, "$0") {
		t.Errorf("gpud offer does not say owned:\n%s", out)
	}
	if !strings.Contains(out, " disk ") {
		t.Errorf("gpud offer does not show the host's free disk:\n%s", out)
	}
}
