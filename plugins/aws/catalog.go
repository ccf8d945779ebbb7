package aws

import (
	"bytes"
	_ "embed"
	"encoding/csv"
	"fmt"
	"strconv"

	"gpud.dev/gpud/api"
)

// The price catalog shipped in the binary (catalog.csv): EC2 GPU
// instance types with their accelerators, vCPUs, memory and prices per
// hour in USD, Linux, us-east-1.
//
// CatalogDate and source: on-demand prices are the us-east-1 Linux list
// prices of aws.amazon.com/ec2/pricing/on-demand as of 2025-06 (after the
// June 2025 P4d/P5 price reduction), written down from that page by hand:
// this build could not reach AWS, so they were not fetched, and they may
// have changed since. Spot prices change hourly per availability zone; the
// catalog's are indicative (about 42% of on-demand, the typical discount
// of these families), never a bid. The same prices are offered in every
// configured region (most US and EU regions list these types within a few
// percent of us-east-1; some Asian regions are 10-30% dearer).
//
// The backend refreshes these from the AWS Price List API
// (pricing:GetProducts, us-east-1) and the spot price history
// (ec2:DescribeSpotPriceHistory) when the credentials allow (pricing.go);
// a price it does not get stays the catalog's.
const CatalogDate = "2025-06"

//go:embed catalog.csv
var catalogCSV []byte

// catalogEntry is one instance type of the catalog.
type catalogEntry struct {
	Type           string
	GPUName        string
	GPUs           int
	GPUMemoryGiB   int
	VCPUs          int
	MemoryGiB      int
	OnDemand, Spot float64
}

// catalog parses catalog.csv; a broken catalog is a build mistake, which
// the package's tests catch.
func catalog() ([]catalogEntry, error) {
	rows, err := csv.NewReader(bytes.NewReader(catalogCSV)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("aws backend: price catalog: %w", err)
	}
	var out []catalogEntry
	for i, r := range rows {
		if i == 0 {
			continue
		}
		if len(r) != 8 {
			return nil, fmt.Errorf("aws backend: price catalog line %d: %d columns, want 8", i+1, len(r))
		}
		var e catalogEntry
		var errs [7]error
		e.Type, e.GPUName = r[0], r[1]
		e.GPUs, errs[0] = strconv.Atoi(r[2])
		e.GPUMemoryGiB, errs[1] = strconv.Atoi(r[3])
		e.VCPUs, errs[2] = strconv.Atoi(r[4])
		e.MemoryGiB, errs[3] = strconv.Atoi(r[5])
		e.OnDemand, errs[4] = strconv.ParseFloat(r[6], 64)
		e.Spot, errs[5] = strconv.ParseFloat(r[7], 64)
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("aws backend: price catalog line %d: %w", i+1, err)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// offer is entry's offer in region, on demand or spot.
func (e catalogEntry) offer(region string, spot bool) api.Offer {
	price := e.OnDemand
	if spot {
		price = e.Spot
	}
	return api.Offer{Backend: "aws", Instance: e.Type, Region: region, Spot: spot, Price: price, Available: "available",
		Resources: api.InstanceResources{GPUs: float64(e.GPUs), GPUName: e.GPUName, GPUMemory: api.Size(e.GPUMemoryGiB) * api.GB,
			CPUs: float64(e.VCPUs), Memory: api.Size(e.MemoryGiB) * api.GB}}
}
