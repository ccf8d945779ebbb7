package daemon

import (
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
)

// TestChooseOffersAppliesTheFleetsPoliciesCheapestFirst: the offers a
// fleet may provision for a request, by the fleet's regions,
// instance_types, spot_policy, max_price and the backoff, cheapest first;
// the reason when max_price leaves none.
func TestChooseOffersAppliesTheFleetsPoliciesCheapestFirst(t *testing.T) {
	offer := func(typ, region string, spot bool, price, gpus float64, gpu string) scaleOffer {
		return scaleOffer{backend: "aws", offer: api.Offer{Backend: "aws", Instance: typ, Region: region, Spot: spot, Price: price,
			Resources: api.InstanceResources{GPUs: gpus, GPUName: gpu, GPUMemory: 24 * api.GB, CPUs: 8, Memory: 32 * api.GB}}}
	}
	offers := []scaleOffer{
		offer("g5.xlarge", "us-east-1", false, 1.006, 1, "A10G"),
		offer("g5.xlarge", "us-east-1", true, 0.4225, 1, "A10G"),
		offer("g5.xlarge", "us-west-2", false, 1.006, 1, "A10G"),
		offer("g6.xlarge", "us-east-1", false, 0.8048, 1, "L4"),
		offer("g5.12xlarge", "us-east-1", false, 5.672, 4, "A10G"),
	}
	one := taskRequest{GPU: 1000, CPU: 2000, Memory: int64(8 * api.GB)}
	never := func(string) bool { return false }
	names := func(os []scaleOffer) string {
		var out []string
		for _, o := range os {
			out = append(out, o.describe())
		}
		return strings.Join(out, "; ")
	}
	for _, c := range []struct {
		name string
		spec api.FleetSpec
		req  taskRequest
		want string
	}{
		{"on demand by default", api.FleetSpec{}, one, "g6.xlarge (aws, us-east-1, $0.8048/h); g5.xlarge (aws, us-east-1, $1.006/h); g5.xlarge (aws, us-west-2, $1.006/h); g5.12xlarge (aws, us-east-1, $5.672/h)"},
		{"spot only", api.FleetSpec{SpotPolicy: api.SpotPolicySpot}, one, "g5.xlarge (aws, us-east-1, spot, $0.4225/h)"},
		{"auto: both", api.FleetSpec{SpotPolicy: api.SpotPolicyAuto, MaxPrice: 0.9}, one, "g5.xlarge (aws, us-east-1, spot, $0.4225/h); g6.xlarge (aws, us-east-1, $0.8048/h)"},
		{"regions", api.FleetSpec{Regions: []string{"us-west-2"}}, one, "g5.xlarge (aws, us-west-2, $1.006/h)"},
		{"instance types", api.FleetSpec{InstanceTypes: []string{"g5.12xlarge"}}, one, "g5.12xlarge (aws, us-east-1, $5.672/h)"},
		{"the request's GPU model and count", api.FleetSpec{}, taskRequest{GPU: 2000, GPUName: "A10G"}, "g5.12xlarge (aws, us-east-1, $5.672/h)"},
		{"too much memory for any", api.FleetSpec{}, taskRequest{GPU: 1000, Memory: int64(64 * api.GB)}, ""},
	} {
		got, _ := chooseOffers(&c.spec, offers, c.req, never)
		if names(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, names(got), c.want)
		}
	}
	_, why := chooseOffers(&api.FleetSpec{MaxPrice: 0.5}, offers, one, never)
	if want := "every offer that fits is above the fleet's max_price $0.5/h (the cheapest is g6.xlarge (aws, us-east-1, $0.8048/h))"; why != want {
		t.Errorf("max_price: %q, want %q", why, want)
	}
	var b offerBackoff
	now := time.Unix(1000, 0)
	key := offers[3].key()
	if d := b.fail(key, now); d != offerBackoffMin || !b.active(key, now.Add(d-time.Second)) || b.active(key, now.Add(d)) {
		t.Fatalf("first backoff %v", d)
	}
	got, _ := chooseOffers(&api.FleetSpec{}, offers, one, func(k string) bool { return b.active(k, now) })
	if names(got) != "g5.xlarge (aws, us-east-1, $1.006/h); g5.xlarge (aws, us-west-2, $1.006/h); g5.12xlarge (aws, us-east-1, $5.672/h)" {
		t.Errorf("a backing-off offer is still chosen: %s", names(got))
	}
	for range 10 {
		b.fail(key, now)
	}
	if b.delay[key] != offerBackoffMax {
		t.Errorf("backoff grows to %v, want the cap %v", b.delay[key], offerBackoffMax)
	}
	b.succeed(key)
	if b.active(key, now) {
		t.Error("a success ends the backoff")
	}
}
