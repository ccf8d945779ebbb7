package daemon

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"gpud.dev/gpud/api"
)

// Which offer a backend fleet provisions for a waiting job
// (fleet_autoscale.go): the cheapest offer of the fleet's instance
// backends that fits the job's request and the fleet's policies —
// regions, instance_types, spot_policy (on-demand by default, as dstack's
// fleets), max_price — and is not backing off after a no-capacity answer
// or a machine that never registered.

// scaleOffer is one offer of one instance backend.
type scaleOffer struct {
	backend string // the backend's name
	offer   api.Offer
}

func (o scaleOffer) key() string {
	return o.backend + "/" + offerKey(o.offer) + "/" + market(o.offer.Spot)
}

func market(spot bool) string {
	if spot {
		return "spot"
	}
	return "on-demand"
}

// describe is how a reason names the offer: "g5.xlarge (aws, us-east-1,
// $1.006/h)".
func (o scaleOffer) describe() string {
	spot := ""
	if o.offer.Spot {
		spot = ", spot"
	}
	return fmt.Sprintf("%s (%s, %s%s, $%s/h)", o.offer.Instance, o.backend, o.offer.Region, spot, price(o.offer.Price))
}

// price writes a price per hour without trailing zeros (1.006, 0.5).
func price(p float64) string {
	s := fmt.Sprintf("%.4f", p)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// fitsRequest reports whether offer o gives what a job asks for.
func fitsRequest(o api.Offer, r taskRequest) bool {
	res := o.Resources
	if r.GPU > 0 {
		if res.GPUs*1000 < float64(r.GPU) {
			return false
		}
		if r.GPUName != "" && !gpuNameMatches(gpuModel(res.GPUName), r.GPUName) {
			return false
		}
		if m := int64(res.GPUMemory); m < r.GPUMemory || r.GPUMemoryMax > 0 && m > r.GPUMemoryMax {
			return false
		}
	}
	return res.CPUs*1000 >= float64(r.CPU) && int64(res.Memory) >= r.Memory
}

// policyRefusal says why the fleet's policies refuse offer o ("" when
// they allow it); the max_price refusal is told apart, for the reason a
// waiting run shows.
func policyRefusal(spec *api.FleetSpec, o api.Offer) (why string, overPrice bool) {
	if len(spec.Regions) > 0 && !slices.Contains(spec.Regions, o.Region) {
		return "region", false
	}
	if len(spec.InstanceTypes) > 0 && !slices.Contains(spec.InstanceTypes, o.Instance) {
		return "instance type", false
	}
	switch spec.SpotPolicy {
	case api.SpotPolicySpot:
		if !o.Spot {
			return "spot_policy", false
		}
	case api.SpotPolicyAuto:
	default: // on-demand, the default
		if o.Spot {
			return "spot_policy", false
		}
	}
	if spec.MaxPrice > 0 && o.Price > spec.MaxPrice {
		return "max_price", true
	}
	return "", false
}

// chooseOffers orders the offers a fleet may provision for request r,
// cheapest first (on-demand before spot at one price), skipping those
// backing off at now. When none is left because of max_price, priceWhy
// says so, naming the cheapest offer that fits.
func chooseOffers(spec *api.FleetSpec, offers []scaleOffer, r taskRequest, backoff func(string) bool) (out []scaleOffer, priceWhy string) {
	var overPrice []scaleOffer
	for _, o := range offers {
		if !fitsRequest(o.offer, r) {
			continue
		}
		why, over := policyRefusal(spec, o.offer)
		if over {
			overPrice = append(overPrice, o)
		}
		if why != "" || backoff(o.key()) {
			continue
		}
		out = append(out, o)
	}
	cheapest := func(a, b scaleOffer) int {
		return cmp.Or(cmp.Compare(a.offer.Price, b.offer.Price), cmp.Compare(market(a.offer.Spot), market(b.offer.Spot)),
			cmp.Compare(a.key(), b.key()))
	}
	slices.SortStableFunc(out, cheapest)
	if len(out) == 0 && len(overPrice) > 0 {
		slices.SortStableFunc(overPrice, cheapest)
		priceWhy = fmt.Sprintf("every offer that fits is above the fleet's max_price $%s/h (the cheapest is %s)", price(spec.MaxPrice), overPrice[0].describe())
	}
	return out, priceWhy
}

// offerBackoff remembers offers that answered no capacity (or whose
// machine never registered): each is skipped for a delay that doubles
// from 10 s to 5 min while it keeps failing, across every fleet.
type offerBackoff struct {
	until map[string]time.Time
	delay map[string]time.Duration
}

const (
	offerBackoffMin = 10 * time.Second
	offerBackoffMax = 5 * time.Minute
)

func (b *offerBackoff) active(key string, now time.Time) bool { return now.Before(b.until[key]) }

func (b *offerBackoff) fail(key string, now time.Time) time.Duration {
	if b.until == nil {
		b.until, b.delay = map[string]time.Time{}, map[string]time.Duration{}
	}
	d := min(max(b.delay[key]*2, offerBackoffMin), offerBackoffMax)
	b.delay[key], b.until[key] = d, now.Add(d)
	return d
}

func (b *offerBackoff) succeed(key string) {
	delete(b.until, key)
	delete(b.delay, key)
}

// autoscaledOfferFleet reports whether offer o (of an instance backend,
// which has no capacity nodes) is one that a backend fleet the run names
// would provision for a job of req, and which fleet: the plan shows it
// with the fleet and price.
func (s *Server) autoscaledOfferFleet(project string, rs runState, req taskRequest, o api.Offer) (string, bool) {
	if len(rs.Place.Fleets) == 0 || rs.Type == api.KindDevEnvironment || !fitsRequest(o, req) {
		return "", false
	}
	typ := ""
	for _, b := range s.projectBackends(project) {
		if b.name == o.Backend {
			typ = b.typ
		}
	}
	for _, bf := range s.backendFleets() {
		if bf.project != project || !slices.Contains(rs.Place.Fleets, bf.name) || !bf.takes(project, typ, o.Backend) {
			continue
		}
		f, err := s.store.Fleets().Get(bf.id)
		if err != nil {
			continue
		}
		spec := fleetConfig(f)
		if spec == nil {
			continue
		}
		if why, _ := policyRefusal(spec, o); why == "" {
			return bf.name, true
		}
	}
	return "", false
}
