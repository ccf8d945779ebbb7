//go:build cgo

package gpu

import (
	"context"
	"testing"
)

// BenchmarkNVMLInventoryDGXH100 measures a full NVML discovery of the
// dgxh100 mock: 8 GPUs, 18 NVLinks each, topology, MIG on one. It counts
// this package's own work; real NVML calls add driver time on top.
func BenchmarkNVMLInventoryDGXH100(b *testing.B) {
	src := openDGXH100(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := src.Inventory(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/discovery")
}

// BenchmarkNVMLSampleDGXH100 measures one NVML sample of the 8 mock GPUs.
func BenchmarkNVMLSampleDGXH100(b *testing.B) {
	benchSample(b, openDGXH100(b))
}
