package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"gpud.dev/gpud/api"
)

// offerGroupKeys are what `gpud offer --group-by` groups by.
var offerGroupKeys = []string{"gpu", "backend", "region"}

// offerGroup is one row of `gpud offer --group-by`.
type offerGroup struct {
	GPU      string  `json:"gpu,omitempty"`
	Backend  string  `json:"backend,omitempty"`
	Region   string  `json:"region,omitempty"`
	Offers   int     `json:"offers"`
	Owned    int     `json:"owned,omitempty"` // offers of owned hosts (no price)
	MinPrice float64 `json:"min_price"`       // over the priced offers
	MaxPrice float64 `json:"max_price"`
	priced   bool
}

// offerPrice shows a price per hour, with (spot) for spot capacity; a
// host of the project's own fleets is "owned" (it has no price), a
// backend's offer without a price "-".
func offerPrice(o api.Offer) string {
	if o.Owned && o.Price == 0 {
		return "owned"
	}
	if o.Price == 0 {
		return "-"
	}
	p := fmt.Sprintf("$%.4g", o.Price)
	if o.Spot {
		p += " (spot)"
	}
	return p
}

// offerGPU names an offer's GPUs for grouping: 8×A100, or - for none.
func offerGPU(r api.InstanceResources) string {
	if r.GPUs == 0 {
		return "-"
	}
	name := r.GPUName
	if name == "" {
		name = "GPU"
	}
	return strconv.FormatFloat(r.GPUs, 'f', -1, 64) + "×" + name
}

// groupOffers groups offers (cheapest first) by keys, keeping the order in
// which each group first appears, so the cheapest group comes first.
func groupOffers(offers []api.Offer, keys []string) []offerGroup {
	var out []offerGroup
	index := map[offerGroup]int{}
	for _, o := range offers {
		var k offerGroup
		for _, key := range keys {
			switch key {
			case "gpu":
				k.GPU = offerGPU(o.Resources)
			case "backend":
				k.Backend = o.Backend
			case "region":
				k.Region = orDash(o.Region)
			}
		}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, k)
		}
		g := &out[i]
		g.Offers++
		switch {
		case o.Owned && o.Price == 0:
			g.Owned++
		case o.Price == 0: // a backend's offer without a price
		case !g.priced:
			g.MinPrice, g.MaxPrice, g.priced = o.Price, o.Price, true
		default:
			g.MinPrice, g.MaxPrice = min(g.MinPrice, o.Price), max(g.MaxPrice, o.Price)
		}
	}
	return out
}

// checkGroupBy refuses a --group-by key other than offerGroupKeys, before
// the server is asked anything.
func checkGroupBy(by string) error {
	if by == "" {
		return nil
	}
	for _, k := range strings.Split(by, ",") {
		if !slices.Contains(offerGroupKeys, k) {
			return usageError(fmt.Errorf("--group-by %q: group by any of %s", k, strings.Join(offerGroupKeys, ",")))
		}
	}
	return nil
}

func printOfferGroups(c *cli.Context, offers []api.Offer, by string) error {
	keys := strings.Split(by, ",")
	groups := groupOffers(offers, keys)
	if c.Bool("json") {
		return printJSON(c.App.Writer, groups)
	}
	header := append(slices.Clone(keys), "offers", "price")
	for i := range header {
		header[i] = strings.ToUpper(header[i])
	}
	tb := newTable(c.App.Writer, header...)
	for _, g := range groups {
		var row []string
		for _, k := range keys {
			row = append(row, map[string]string{"gpu": g.GPU, "backend": g.Backend, "region": g.Region}[k])
		}
		tb.row(append(row, strconv.Itoa(g.Offers), groupPrice(g))...)
	}
	return tb.flush()
}

// groupPrice is a group's price range, "owned" for its owned hosts.
func groupPrice(g offerGroup) string {
	var parts []string
	if g.Owned > 0 {
		parts = append(parts, "owned")
	}
	if g.priced {
		price := fmt.Sprintf("$%.4g", g.MinPrice)
		if g.MaxPrice != g.MinPrice {
			price += "..$" + fmt.Sprintf("%.4g", g.MaxPrice)
		}
		parts = append(parts, price)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
