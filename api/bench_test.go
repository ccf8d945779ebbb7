package api

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkParse200Lines parses a 200-line service configuration (replica
// groups, env, probes, rate limits) end to end: YAML, validation, defaults.
// Goal: under 1 ms per parse.
func BenchmarkParse200Lines(b *testing.B) {
	data, err := os.ReadFile("testdata/bench-200-lines.yml")
	if err != nil {
		b.Fatal(err)
	}
	if n := bytes.Count(data, []byte("\n")); n != 200 {
		b.Fatalf("benchmark input has %d lines, want 200", n)
	}
	if _, err := Parse("bench.yml", data); err != nil {
		b.Fatalf("benchmark input is invalid: %v", err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Parse("bench.yml", data); err != nil {
			b.Fatal(err)
		}
	}
	perOp := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(perOp*1e3, "ms/parse")
	b.ReportMetric(200/perOp, "lines/s")
}
