//go:build unix

package api

import (
	"bytes"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-yaml/parser"
)

// cpuTime is the CPU time (user and system, all threads) the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkParse200Lines parses a 200-line service configuration (replica
// groups, env, probes, rate limits) end to end: YAML, validation, defaults.
// Goal: under 1 ms per parse. Besides wall time it reports CPU time per
// parse, which stays meaningful on a machine shared with other work.
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
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := Parse("bench.yml", data); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(b.Elapsed().Seconds()*1e3/n, "ms/parse")
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(time.Millisecond)/n, "cpu-ms/parse")
	b.ReportMetric(200*n/b.Elapsed().Seconds(), "lines/s")
}

// BenchmarkYAMLOnly200Lines parses the same file with goccy/go-yaml's parser
// alone: the floor under BenchmarkParse200Lines, to tell the cost of gpud's
// validation from the cost of reading YAML.
func BenchmarkYAMLOnly200Lines(b *testing.B) {
	data, err := os.ReadFile("testdata/bench-200-lines.yml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := parser.ParseBytes(data, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(b.Elapsed().Seconds()*1e3/n, "ms/parse")
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(time.Millisecond)/n, "cpu-ms/parse")
}

// BenchmarkSetFields200Lines lists the fields the 200-line service sets
// (reflection against its kind's defaults): the per-plan cost of the
// field rules' input, next to BenchmarkParse200Lines.
func BenchmarkSetFields200Lines(b *testing.B) {
	data, err := os.ReadFile("testdata/bench-200-lines.yml")
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := Parse("bench.yml", data)
	if err != nil {
		b.Fatalf("benchmark input is invalid: %v", err)
	}
	n := len(SetFields(cfg))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if len(SetFields(cfg)) != n {
			b.Fatal("SetFields changed its answer")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/config")
	b.ReportMetric(float64(n), "fields")
}
