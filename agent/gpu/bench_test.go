package gpu

import (
	"context"
	"testing"
	"time"
)

// BenchmarkFallbackInventoryDGXH100 measures a full fallback discovery:
// four nvidia-smi processes (played back) and the sysfs scan.
func BenchmarkFallbackInventoryDGXH100(b *testing.B) {
	opts := dgxFallbackOptions()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Discover(ctx, opts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/discovery")
}

// BenchmarkFallbackSampleDGXH100 measures one nvidia-smi sample of 8 GPUs
// and reports the CPU it costs, which is what sampling every few seconds
// adds to the agent.
func BenchmarkFallbackSampleDGXH100(b *testing.B) {
	benchSample(b, newFallback(dgxFallbackOptions()))
}

// BenchmarkFakeInventory measures ParseFake of a 64-GPU spec.
func BenchmarkFakeInventory(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseFake("32xH100:80GB,32xA100:40GB"); err != nil {
			b.Fatal(err)
		}
	}
}

// benchSample runs src.Sample and reports wall and CPU time per sample
// (CPU includes child processes, such as nvidia-smi).
func benchSample(b *testing.B, src Source) {
	ctx := context.Background()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		if _, err := src.Sample(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cpu := cpuTime(b) - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/sample")
	// Sampling every 5 seconds costs this share of one core.
	b.ReportMetric(100*cpu.Seconds()/float64(b.N)/5, "%core@5s")
}

// cpuTime is this process's user+system CPU time, its reaped children's included.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	self, children, err := processCPU()
	if err != nil {
		b.Fatal(err)
	}
	return self + children
}
