package gpu

import (
	"context"
	"strings"
	"testing"
)

func TestParseFakeBuildsInventories(t *testing.T) {
	tests := []struct {
		spec      string
		wantNames []string
		wantMem   []int64
		wantLinks map[[2]int]Link
	}{{
		spec:      "8xH100:80GB",
		wantNames: slicesOf("NVIDIA H100 80GB HBM3", 8),
		wantMem:   repeat(80<<30, 8),
		wantLinks: map[[2]int]Link{{0, 0}: LinkSelf, {0, 7}: "NV18", {3, 4}: "NV18"},
	}, {
		spec:      "2xA100:40GB,1xT4:16GB",
		wantNames: []string{"NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "Tesla T4"},
		wantMem:   []int64{40 << 30, 40 << 30, 16 << 30},
		wantLinks: map[[2]int]Link{{0, 1}: "NV12", {1, 2}: LinkSys, {2, 2}: LinkSelf},
	}, {
		spec:      "h100",
		wantNames: []string{"NVIDIA H100 80GB HBM3"},
		wantMem:   []int64{80 << 30},
	}, {
		spec:      "2 x L4, 1xMI300X",
		wantNames: []string{"NVIDIA L4", "NVIDIA L4", "AMD Instinct MI300X"},
		wantMem:   []int64{24 << 30, 24 << 30, 192 << 30},
		wantLinks: map[[2]int]Link{{0, 1}: LinkNode, {0, 2}: LinkSys},
	}, {
		spec:      "4xRTX6000:48GB",
		wantNames: slicesOf("NVIDIA RTX6000", 4),
		wantMem:   repeat(48<<30, 4),
	}, {
		spec:      "1xA10G:512MB",
		wantNames: []string{"NVIDIA A10G"},
		wantMem:   []int64{512 << 20},
	}}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			inv, err := ParseFake(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if inv.Source != SourceFake || len(inv.Devices) != len(tt.wantNames) {
				t.Fatalf("source %q with %d devices, want fake with %d", inv.Source, len(inv.Devices), len(tt.wantNames))
			}
			uuids := map[string]bool{}
			for i, d := range inv.Devices {
				if d.Index != i || d.Name != tt.wantNames[i] || d.MemoryTotal != tt.wantMem[i] || !d.Healthy {
					t.Errorf("device %d = %+v, want %s with %d bytes, healthy", i, d, tt.wantNames[i], tt.wantMem[i])
				}
				if uuids[d.UUID] || d.UUID == "" || d.PCIBusID == "" {
					t.Errorf("device %d: uuid %q / bus %q missing or repeated", i, d.UUID, d.PCIBusID)
				}
				uuids[d.UUID] = true
			}
			for ij, want := range tt.wantLinks {
				if got := inv.Links[ij[0]][ij[1]]; got != want {
					t.Errorf("link %v = %q, want %q", ij, got, want)
				}
				if got := inv.Links[ij[1]][ij[0]]; got != want {
					t.Errorf("link %v reversed = %q, want the same %q", ij, got, want)
				}
			}
		})
	}
}

func TestParseFakeRejectsBadSpecsWithAFix(t *testing.T) {
	tests := []struct{ spec, wantInError string }{
		{"", "write COUNTxMODEL"},
		{"8x", "write COUNTxMODEL"},
		{"0xH100", "count must be between 1 and 64"},
		{"65xH100", "count must be between 1 and 64"},
		{"40xH100,40xA100", "more than 64 devices"},
		{"2xWeirdGPU", "unknown model WeirdGPU: give its memory"},
		{"8xH100:80", "not a memory size"},
		{"8xH100:-1GB", "not a memory size"},
		{"8xH100:lots", "not a memory size"},
		{"8xH100:80GB,,", "write COUNTxMODEL"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			_, err := ParseFake(tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.wantInError) {
				t.Fatalf("ParseFake(%q) error %v, want one containing %q", tt.spec, err, tt.wantInError)
			}
		})
	}
}

func TestFakeSourceServesCopiesAndSamples(t *testing.T) {
	src, err := Open(context.Background(), Options{Fake: "2xH100"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	inv, _ := src.Inventory(context.Background())
	inv.Devices[0].Name = "changed"
	inv.Links[0][1] = LinkSys
	again, err := src.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if again.Devices[0].Name == "changed" || again.Links[0][1] == LinkSys {
		t.Fatal("changing a returned inventory changed the source")
	}
	samples, err := src.Sample(context.Background())
	if err != nil || len(samples) != 2 || samples[1].UUID != again.Devices[1].UUID {
		t.Fatalf("samples %+v, %v; want one per fake device", samples, err)
	}
	if _, err := Open(context.Background(), Options{Fake: "2xNope"}); err == nil {
		t.Fatal("Open accepted a bad fake spec")
	}
}

func slicesOf(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func repeat(v int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}
