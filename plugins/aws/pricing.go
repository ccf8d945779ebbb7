package aws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/pricing"
	ptypes "github.com/aws/aws-sdk-go-v2/service/pricing/types"
)

// RefreshInterval is how often the backend asks AWS for current prices
// after the first time, at start.
const RefreshInterval = 6 * time.Hour

// livePrices are the prices fetched from AWS, by region and instance
// type, over the catalog's; each says where it came from.
type livePrices struct {
	mu       sync.RWMutex
	onDemand map[string]float64 // region/type
	spot     map[string]float64
	at       time.Time
}

// price is e's price per hour in region: AWS's when a refresh got one,
// else the catalog's.
func (b *Backend) price(region string, e catalogEntry, spot bool) float64 {
	b.live.mu.RLock()
	defer b.live.mu.RUnlock()
	m, def := b.live.onDemand, e.OnDemand
	if spot {
		m, def = b.live.spot, e.Spot
	}
	if p, ok := m[region+"/"+e.Type]; ok && p > 0 {
		return p
	}
	return def
}

// PriceSource says where the offers' prices come from: "catalog 2025-06"
// or "pricing API <time>" once a refresh got at least one price.
func (b *Backend) PriceSource() string {
	b.live.mu.RLock()
	defer b.live.mu.RUnlock()
	if b.live.at.IsZero() {
		return "catalog " + CatalogDate
	}
	return "pricing API " + b.live.at.UTC().Format(time.RFC3339)
}

// refreshLoop refreshes the prices at once and every RefreshInterval
// until ctx ends. It never fails the backend.
func (b *Backend) refreshLoop(ctx context.Context) {
	for {
		b.RefreshPrices(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(RefreshInterval):
		}
	}
}

// RefreshPrices asks the AWS Price List Query API (pricing:GetProducts)
// for the on-demand Linux price of every catalog type in every region, and
// EC2 (DescribeSpotPriceHistory) for the latest spot prices, and replaces
// the catalog's prices with those it got. Any error (AccessDenied, no
// network) keeps the prices it had, with one log line per source.
func (b *Backend) RefreshPrices(ctx context.Context) {
	od, odErr := b.fetchOnDemand(ctx)
	sp, spErr := b.fetchSpot(ctx)
	if odErr != nil {
		b.log.Info().Err(odErr).Str("prices", b.PriceSource()).Msg("aws backend: on-demand prices not refreshed from the AWS pricing API; keeping them")
	}
	if spErr != nil {
		b.log.Info().Err(spErr).Str("prices", b.PriceSource()).Msg("aws backend: spot prices not refreshed (DescribeSpotPriceHistory); keeping them")
	}
	if len(od) == 0 && len(sp) == 0 {
		return
	}
	b.live.mu.Lock()
	// Merged: a price got before and missing now (a refresh cut short)
	// stays.
	if b.live.onDemand == nil {
		b.live.onDemand, b.live.spot = map[string]float64{}, map[string]float64{}
	}
	maps.Copy(b.live.onDemand, od)
	maps.Copy(b.live.spot, sp)
	b.live.at = time.Now()
	b.live.mu.Unlock()
	b.log.Info().Int("on_demand", len(od)).Int("spot", len(sp)).Str("prices", b.PriceSource()).Msg("aws backend: prices refreshed")
}

// pricingClient is the Price List Query API client: us-east-1 (where AWS
// serves it), or pricing_endpoint_url; nil where there is none to ask (an
// EC2-compatible endpoint_url without a pricing_endpoint_url: AWS's list
// prices are not that cloud's).
func (b *Backend) pricingClient() *pricing.Client {
	if b.cfg.EndpointURL != "" && b.cfg.PricingEndpointURL == "" {
		return nil
	}
	creds := credentials.NewStaticCredentialsProvider(b.cfg.AccessKeyID, b.cfg.SecretAccessKey, b.cfg.SessionToken)
	opts := pricing.Options{Region: "us-east-1", Credentials: aws.NewCredentialsCache(creds),
		HTTPClient: &http.Client{Transport: transport(b.cfg.DenyServerNetwork)}, Retryer: retryer()}
	if b.cfg.PricingEndpointURL != "" {
		opts.BaseEndpoint = aws.String(b.cfg.PricingEndpointURL)
	}
	return pricing.New(opts)
}

func (b *Backend) fetchOnDemand(ctx context.Context) (map[string]float64, error) {
	cl := b.pricingClient()
	if cl == nil {
		return nil, errors.New("endpoint_url is set without pricing_endpoint_url: the catalog's prices are kept")
	}
	out := map[string]float64{}
	for _, region := range b.cfg.Regions {
		for _, e := range b.catalog {
			cctx, cancel := b.callCtx(ctx)
			p, err := onDemandPrice(cctx, cl, region, e.Type)
			cancel()
			if err != nil {
				return out, fmt.Errorf("pricing:GetProducts %s in %s: %w", e.Type, region, err)
			}
			if p > 0 {
				out[region+"/"+e.Type] = p
			}
		}
	}
	return out, nil
}

// onDemandPrice is the Linux, shared-tenancy, no-software on-demand price
// per hour of typ in region, 0 when AWS lists none.
func onDemandPrice(ctx context.Context, cl *pricing.Client, region, typ string) (float64, error) {
	f := func(k, v string) ptypes.Filter {
		return ptypes.Filter{Type: ptypes.FilterTypeTermMatch, Field: aws.String(k), Value: aws.String(v)}
	}
	out, err := cl.GetProducts(ctx, &pricing.GetProductsInput{ServiceCode: aws.String("AmazonEC2"), MaxResults: aws.Int32(10),
		Filters: []ptypes.Filter{f("instanceType", typ), f("regionCode", region), f("operatingSystem", "Linux"),
			f("tenancy", "Shared"), f("preInstalledSw", "NA"), f("capacitystatus", "Used")}})
	if err != nil {
		return 0, err
	}
	for _, doc := range out.PriceList {
		if p := parseOnDemand(doc); p > 0 {
			return p, nil
		}
	}
	return 0, nil
}

// parseOnDemand reads the hourly USD price of a Price List product
// document (terms.OnDemand.*.priceDimensions.*.pricePerUnit.USD); 0 when
// it has none.
func parseOnDemand(doc string) float64 {
	var d struct {
		Terms struct {
			OnDemand map[string]struct {
				PriceDimensions map[string]struct {
					Unit         string            `json:"unit"`
					PricePerUnit map[string]string `json:"pricePerUnit"`
				} `json:"priceDimensions"`
			} `json:"OnDemand"`
		} `json:"terms"`
	}
	if json.Unmarshal([]byte(doc), &d) != nil {
		return 0
	}
	for _, t := range d.Terms.OnDemand {
		for _, pd := range t.PriceDimensions {
			if !strings.EqualFold(pd.Unit, "Hrs") {
				continue
			}
			if p, err := strconv.ParseFloat(pd.PricePerUnit["USD"], 64); err == nil && p > 0 {
				return p
			}
		}
	}
	return 0
}

// fetchSpot is the latest spot price of each catalog type per region:
// the cheapest zone's latest.
func (b *Backend) fetchSpot(ctx context.Context) (map[string]float64, error) {
	types := make([]ec2types.InstanceType, 0, len(b.catalog))
	for _, e := range b.catalog {
		types = append(types, ec2types.InstanceType(e.Type))
	}
	out := map[string]float64{}
	for _, region := range b.cfg.Regions {
		cctx, cancel := b.callCtx(ctx)
		got, err := b.clients[region].DescribeSpotPriceHistory(cctx, &ec2.DescribeSpotPriceHistoryInput{InstanceTypes: types,
			ProductDescriptions: []string{"Linux/UNIX"}, StartTime: aws.Time(time.Now())})
		cancel()
		if err != nil {
			return out, b.callError("DescribeSpotPriceHistory", region, err)
		}
		latest := map[string]ec2types.SpotPrice{} // by type and zone
		for _, sp := range got.SpotPriceHistory {
			k := string(sp.InstanceType) + "/" + aws.ToString(sp.AvailabilityZone)
			if have, ok := latest[k]; !ok || aws.ToTime(sp.Timestamp).After(aws.ToTime(have.Timestamp)) {
				latest[k] = sp
			}
		}
		for _, sp := range latest {
			p, err := strconv.ParseFloat(aws.ToString(sp.SpotPrice), 64)
			if err != nil || p <= 0 || !slices.Contains(types, sp.InstanceType) {
				continue
			}
			k := region + "/" + string(sp.InstanceType)
			if have, ok := out[k]; !ok || p < have {
				out[k] = p
			}
		}
	}
	return out, nil
}
