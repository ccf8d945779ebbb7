package aws

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/plugins/aws/ec2fake"
)

// pricingFake is a local AWS Price List Query API endpoint (JSON 1.1,
// X-Amz-Target AWSPriceListService.GetProducts): it answers the prices a
// test sets, by region and instance type, or AccessDenied.
type pricingFake struct {
	*httptest.Server
	mu     sync.Mutex
	prices map[string]string // region/type: USD per hour
	deny   bool
	calls  []map[string]string // each call's filters
}

func startPricingFake(deny bool) *pricingFake {
	f := &pricingFake{prices: map[string]string{}, deny: deny}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

func (f *pricingFake) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	fail := func(code int, typ, msg string) {
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"__type":%q,"Message":%q}`, typ, msg)
	}
	if !strings.Contains(r.Header.Get("Authorization"), "Credential="+ec2fake.AccessKeyID+"/") || !strings.Contains(r.Header.Get("Authorization"), "/us-east-1/pricing/") {
		fail(400, "UnrecognizedClientException", "The security token included in the request is invalid.")
		return
	}
	if r.Header.Get("X-Amz-Target") != "AWSPriceListService.GetProducts" {
		fail(400, "UnknownOperationException", r.Header.Get("X-Amz-Target"))
		return
	}
	var in struct {
		ServiceCode string
		Filters     []struct{ Type, Field, Value string }
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		fail(400, "SerializationException", err.Error())
		return
	}
	filters := map[string]string{"ServiceCode": in.ServiceCode}
	for _, x := range in.Filters {
		filters[x.Field] = x.Value
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, filters)
	if f.deny {
		fail(400, "AccessDeniedException", "User is not authorized to perform: pricing:GetProducts")
		return
	}
	list := []string{}
	if p, ok := f.prices[filters["regionCode"]+"/"+filters["instanceType"]]; ok {
		doc := fmt.Sprintf(`{"product":{"productFamily":"Compute Instance","attributes":{"instanceType":%q,"regionCode":%q}},"serviceCode":"AmazonEC2",`+
			`"terms":{"OnDemand":{"SKU.JRTCKXETXF":{"offerTermCode":"JRTCKXETXF","priceDimensions":{"SKU.JRTCKXETXF.6YS6EN2CT7":{"unit":"Hrs","pricePerUnit":{"USD":%q}}}}}}}`,
			filters["instanceType"], filters["regionCode"], p)
		list = append(list, doc)
	}
	out, err := json.Marshal(map[string]any{"FormatVersion": "aws_v1", "PriceList": list})
	if err != nil {
		fail(500, "InternalErrorException", err.Error())
		return
	}
	if _, err := w.Write(out); err != nil {
		return
	}
}

// syncBuffer is a log sink safe for the backend's refresh goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func pricedOffer(t *testing.T, b *Backend, typ string, spot bool) float64 {
	t.Helper()
	offers, err := b.Offers(context.Background(), plugins.OfferQuery{Spot: &spot, Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offers {
		if o.Instance == typ {
			return o.Price
		}
	}
	t.Fatalf("no offer of %s", typ)
	return 0
}

func TestRefreshedPricesReplaceTheCatalogsInTheOffers(t *testing.T) {
	ec2 := ec2fake.Start("us-east-1")
	defer ec2.Close()
	pf := startPricingFake(false)
	defer pf.Close()
	pf.prices["us-east-1/g5.xlarge"] = "0.9000000000"
	ec2.SpotPrice("us-east-1", "g5.xlarge", "0.3012")
	cfg := testConfig(ec2.URL)
	cfg.Regions, cfg.PricingEndpointURL = []string{"us-east-1"}, pf.URL
	b := newBackend(t, cfg)
	b.RefreshPrices(context.Background())

	if p := pricedOffer(t, b, "g5.xlarge", false); p != 0.9 {
		t.Fatalf("g5.xlarge on demand: %v, want the pricing API's 0.9", p)
	}
	if p := pricedOffer(t, b, "g5.xlarge", true); p != 0.3012 {
		t.Fatalf("g5.xlarge spot: %v, want the latest spot price 0.3012", p)
	}
	if p := pricedOffer(t, b, "g4dn.xlarge", false); p != 0.526 {
		t.Fatalf("g4dn.xlarge on demand: %v, want the catalog's 0.526 (the API listed none)", p)
	}
	if src := b.PriceSource(); !strings.HasPrefix(src, "pricing API ") {
		t.Fatalf("price source %q", src)
	}
	pf.mu.Lock()
	first := pf.calls[0]
	pf.mu.Unlock()
	for k, v := range map[string]string{"ServiceCode": "AmazonEC2", "regionCode": "us-east-1", "operatingSystem": "Linux", "tenancy": "Shared",
		"preInstalledSw": "NA", "capacitystatus": "Used"} {
		if first[k] != v {
			t.Errorf("GetProducts filter %s = %q, want %q (%v)", k, first[k], v, first)
		}
	}
	if first["instanceType"] == "" {
		t.Errorf("GetProducts without instanceType: %v", first)
	}
}

func TestPricingAccessDeniedKeepsTheCatalog(t *testing.T) {
	ec2 := ec2fake.Start("us-east-1")
	defer ec2.Close()
	pf := startPricingFake(true)
	defer pf.Close()
	cfg := testConfig(ec2.URL)
	cfg.Regions, cfg.PricingEndpointURL = []string{"us-east-1"}, pf.URL
	var logs syncBuffer
	b, err := New(cfg, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.RefreshPrices(context.Background())
	if p := pricedOffer(t, b, "g5.xlarge", false); p != 1.006 {
		t.Fatalf("g5.xlarge on demand: %v, want the catalog's 1.006", p)
	}
	if p := pricedOffer(t, b, "g5.xlarge", true); p != 0.4225 {
		t.Fatalf("g5.xlarge spot: %v, want the catalog's 0.4225", p)
	}
	if src := b.PriceSource(); src != "catalog "+CatalogDate {
		t.Fatalf("price source %q", src)
	}
	if l := logs.String(); !strings.Contains(l, "AccessDeniedException") || !strings.Contains(l, "not refreshed from the AWS pricing API") {
		t.Fatalf("log: %s", l)
	}
	if err := b.Check(context.Background()); err != nil {
		t.Fatalf("the backend still works: %v", err)
	}
}
