package api

import (
	"strings"
	"testing"
)

func intp(v int) *int { return &v }

func TestParseGPUShorthandForms(t *testing.T) {
	gb := func(v int) *Size { s := Size(v) * GB; return &s }
	tests := []struct {
		in       string
		vendor   string
		names    string
		count    Range[int]
		memory   Range[Size]
		fraction float64
	}{
		{in: "H100:80GB:8", vendor: VendorNVIDIA, names: "H100", count: Exact(8), memory: Range[Size]{Min: gb(80), Max: gb(80)}},
		{in: "8:80GB:H100", vendor: VendorNVIDIA, names: "H100", count: Exact(8), memory: Range[Size]{Min: gb(80), Max: gb(80)}},
		{in: "A100,H100:2..", vendor: VendorNVIDIA, names: "A100,H100", count: AtLeast(2)},
		{in: "amd:MI300X:4", vendor: VendorAMD, names: "MI300X", count: Exact(4)},
		{in: "MI300X:4..", vendor: VendorAMD, names: "MI300X", count: AtLeast(4)},
		{in: "tpu-v5e-8", vendor: VendorTPU, names: "tpu-v5e-8", count: Exact(1)},
		{in: "v5litepod-4", vendor: VendorTPU, names: "v5litepod-4", count: Exact(1)},
		{in: "google:v2-8", vendor: VendorTPU, names: "v2-8", count: Exact(1)},
		{in: "tt-galaxy-wh:32", vendor: VendorTT, names: "tt-galaxy-wh", count: Exact(32)},
		{in: "tenstorrent:n150", vendor: VendorTT, names: "n150", count: Exact(1)},
		{in: "24GB..:1..2", count: Range[int]{Min: intp(1), Max: intp(2)}, memory: Range[Size]{Min: gb(24)}},
		{in: "40GB..80GB:4", count: Exact(4), memory: Range[Size]{Min: gb(40), Max: gb(80)}},
		{in: "24GB", count: Exact(1), memory: Range[Size]{Min: gb(24), Max: gb(24)}},
		{in: "nvidia:1..8", vendor: VendorNVIDIA, count: Range[int]{Min: intp(1), Max: intp(8)}},
		{in: "2", count: Exact(2)},
		{in: "0", count: Exact(0)},
		{in: "0.5", count: Exact(1), fraction: 0.5},
		{in: "H100:0.25", vendor: VendorNVIDIA, names: "H100", count: Exact(1), fraction: 0.25},
		{in: "H100", vendor: VendorNVIDIA, names: "H100", count: Exact(1)},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			g, err := ParseGPU(tt.in)
			if err != nil {
				t.Fatalf("ParseGPU(%q): %v", tt.in, err)
			}
			if g.Vendor != tt.vendor || strings.Join(g.Names, ",") != tt.names || g.Fraction != tt.fraction {
				t.Errorf("got vendor %q names %v fraction %v; want %q %q %v", g.Vendor, g.Names, g.Fraction, tt.vendor, tt.names, tt.fraction)
			}
			if got, want := g.Count.Format(formatOne[int]), tt.count.Format(formatOne[int]); got != want {
				t.Errorf("count %s, want %s", got, want)
			}
			if got, want := g.Memory.Format(formatOne[Size]), tt.memory.Format(formatOne[Size]); got != want {
				t.Errorf("memory %s, want %s", got, want)
			}
		})
	}
}

func TestParseGPURejectsBadShorthandWithAFix(t *testing.T) {
	tests := map[string]string{
		"H100:x":          "count must be a number or range",
		"H100::8":         "empty part",
		"nvidia:amd":      "two vendors",
		"80GB:40GB":       "memory twice",
		"2:4":             "count twice",
		"1.5":             "fraction of one GPU",
		"H100:0.5..1":     "count must be",
		"H100,MI300X":     "different vendors",
		"amd:bad$":        "not a GPU name",
		"H100:2048":       "at most 1024",
		"8..2":            "count must be",
		"H100:0.5:24GB:x": "names twice",
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) {
			_, err := ParseGPU(in)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("ParseGPU(%q) = %v, want an error containing %q", in, err, want)
			}
		})
	}
}

func TestParseCPUWithArchitecture(t *testing.T) {
	tests := []struct {
		in, arch, count string
	}{
		{"16", "", "16"},
		{"2..", "", "2.."},
		{"..64", "", "..64"},
		{"x86:16", "x86", "16"},
		{"arm:8..", "arm", "8.."},
		{"8..:aarch64", "arm", "8.."},
		{"amd64:96..", "x86", "96.."},
	}
	for _, tt := range tests {
		c, err := ParseCPU(tt.in)
		if err != nil {
			t.Fatalf("ParseCPU(%q): %v", tt.in, err)
		}
		if c.Arch != tt.arch || c.Count.Format(formatOne[int]) != tt.count {
			t.Errorf("ParseCPU(%q) = %s %s, want %s %s", tt.in, c.Arch, c.Count.Format(formatOne[int]), tt.arch, tt.count)
		}
	}
	for _, bad := range []string{"x86:arm", "x86:16:2", "sixteen", "16..8", "x86:-1"} {
		if _, err := ParseCPU(bad); err == nil {
			t.Errorf("ParseCPU(%q) accepted", bad)
		}
	}
}

func TestParsePortForms(t *testing.T) {
	tests := map[string]PortMapping{
		"8080":      {Container: 8080},
		"80:8080":   {Local: 80, Container: 8080},
		"*:8080":    {LocalAny: true, Container: 8080},
		" 443:443 ": {Local: 443, Container: 443},
	}
	for in, want := range tests {
		got, err := ParsePort(in)
		if err != nil || got != want {
			t.Errorf("ParsePort(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		again, err := ParsePort(got.String())
		if err != nil || again != got {
			t.Errorf("ParsePort(%q.String()) = %+v, %v", in, again, err)
		}
	}
	for _, bad := range []string{"0", "65536", "x:80", "80:", "*:*", ""} {
		if _, err := ParsePort(bad); err == nil {
			t.Errorf("ParsePort(%q) accepted", bad)
		}
	}
}

func TestResourceDefaultsMatchDstack(t *testing.T) {
	cfg, err := Parse("t.yml", []byte("type: task\ncommands: [true]\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Task.Resources
	got := []string{r.CPU.Count.Format(formatOne[int]), r.Memory.Format(formatOne[Size]), r.Disk.Size.Format(formatOne[Size]), r.GPU.Count.Format(formatOne[int])}
	want := []string{"2..", "8GB..", "100GB..", "0.."}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("defaults cpu/memory/disk/gpu = %v, want %v", got, want)
	}
	if cfg.Task.Nodes.Format(formatOne[int]) != "1" || cfg.Task.SpotPolicy != SpotPolicyOnDemand {
		t.Fatalf("task defaults: nodes %v spot %q", cfg.Task.Nodes, cfg.Task.SpotPolicy)
	}
}

func TestElasticNodesAndFractionalLongForm(t *testing.T) {
	src := "type: task\nnodes: 2..8\ncommands: [x]\nresources:\n  gpu: {count: 1, memory_share: 20GB}\n"
	cfg, err := Parse("t.yml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Task.Elastic() || *cfg.Task.Nodes.Min != 2 || *cfg.Task.Nodes.Max != 8 {
		t.Fatalf("nodes 2..8 should be an elastic gang of 2 to 8, got %+v", cfg.Task.Nodes)
	}
	g := cfg.Task.Resources.GPU
	if !g.Fractional() || g.MemoryShare.Bytes() != 20*GB {
		t.Fatalf("memory_share 20GB should make a fractional request, got %+v", g)
	}
}

func TestPreemptibleFollowsThePriorityClassUnlessSet(t *testing.T) {
	tests := map[string]bool{
		"priority: inference\n":         false,
		"priority: build\n":             false,
		"priority: train\n":             true,
		"priority: build-preemptible\n": true,
		"priority: 90\n":                true,
		"":                              true,
		"priority: inference\npreemptible: true\n": true,
		"priority: train\npreemptible: false\n":    false,
	}
	for extra, want := range tests {
		cfg, err := Parse("t.yml", []byte("type: task\ncommands: [x]\n"+extra))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Task.IsPreemptible(); got != want {
			t.Errorf("%q: preemptible %v, want %v", extra, got, want)
		}
	}
}
