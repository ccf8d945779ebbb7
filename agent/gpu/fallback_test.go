package gpu

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFallbackReadsDGXH100CaptureAndSysfs(t *testing.T) {
	inv, err := Discover(context.Background(), dgxFallbackOptions())
	if err != nil {
		t.Fatal(err)
	}
	requireSameInventory(t, inv, wantDGXH100(SourceNvidiaSMI))
}

func TestFallbackSampleReadsQueryGPU(t *testing.T) {
	samples, err := Sample(context.Background(), dgxFallbackOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != len(dgxH100) {
		t.Fatalf("got %d samples, want %d", len(samples), len(dgxH100))
	}
	for i, g := range dgxH100 {
		want := DeviceSample{Index: i, UUID: g.uuid, Utilization: g.util, MemoryUsed: g.usedMiB << 20,
			PowerW: float64(g.powerMW) / 1000, TemperatureC: g.tempC}
		if samples[i] != want {
			t.Errorf("sample %d = %+v, want %+v", i, samples[i], want)
		}
	}
}

func TestFallbackFindsOtherVendorsBySysfs(t *testing.T) {
	tests := []struct {
		name       string
		smi        string // nvidia-smi path; "" for one that does not exist
		wantSource string
	}{{
		name:       "no nvidia-smi: AMD, Tenstorrent and TPU found, driverless NVIDIA reported unhealthy",
		wantSource: SourceSysfs,
	}, {
		name:       "nvidia-smi without a driver: same devices, NVIDIA one explains the driver failure",
		smi:        testdataDir("nodriver", "nvidia-smi"),
		wantSource: SourceSysfs,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			smi := tt.smi
			if smi == "" {
				smi = filepath.Join(t.TempDir(), "nvidia-smi")
			} else {
				smi, _ = filepath.Abs(smi)
			}
			inv, err := Discover(context.Background(), Options{NvidiaSMI: smi, SysfsRoot: testdataDir("mixed", "sysfs"), DisableNVML: true})
			if err != nil {
				t.Fatal(err)
			}
			if inv.Source != tt.wantSource {
				t.Errorf("source %q, want %q", inv.Source, tt.wantSource)
			}
			byVendor := map[string]Device{}
			for _, d := range inv.Devices {
				byVendor[d.Vendor] = d
			}
			if len(inv.Devices) != 4 || len(byVendor) != 4 {
				t.Fatalf("got devices %+v, want one each of nvidia, amd, tenstorrent, tpu", inv.Devices)
			}
			if d := byVendor[VendorAMD]; d.Name != "AMD Instinct MI300X" || d.MemoryTotal != 192<<30 || !d.Healthy {
				t.Errorf("AMD device %+v, want a healthy MI300X with 192GiB from mem_info_vram_total", d)
			}
			if d := byVendor[VendorTenstorrent]; d.Name != "Tenstorrent Wormhole" || d.PCIBusID != "0000:41:00.0" {
				t.Errorf("Tenstorrent device %+v", d)
			}
			if d := byVendor[VendorGoogle]; d.Name != "Google TPU v5e" || d.MemoryTotal != 16<<30 {
				t.Errorf("TPU device %+v, want TPU v5e with 16GiB (and not the gVNIC or NVMe)", d)
			}
			nv := byVendor[VendorNVIDIA]
			if nv.Healthy || len(nv.Problems) != 1 || !strings.Contains(nv.Problems[0], "nvidia-smi") {
				t.Errorf("driverless NVIDIA device %+v, want unhealthy with the nvidia-smi failure", nv)
			}
			if tt.smi != "" && !strings.Contains(nv.Problems[0], "couldn't communicate with the NVIDIA driver") {
				t.Errorf("problem %q does not carry nvidia-smi's own message", nv.Problems[0])
			}
			for i, d := range inv.Devices {
				if d.Index != i {
					t.Errorf("device %d has index %d", i, d.Index)
				}
			}
			if inv.Links != nil {
				t.Errorf("links %v, want none without nvidia-smi topo", inv.Links)
			}
		})
	}
}

func TestFallbackOnBareHostReportsNone(t *testing.T) {
	inv, err := Discover(context.Background(), Options{
		NvidiaSMI: filepath.Join(t.TempDir(), "nvidia-smi"), SysfsRoot: t.TempDir(), DisableNVML: true})
	if err != nil {
		t.Fatal(err)
	}
	if inv.Source != SourceNone || inv.Devices == nil || len(inv.Devices) != 0 {
		t.Fatalf("got %+v, want source none and an empty (not nil) device list", inv)
	}
	samples, err := Sample(context.Background(), Options{NvidiaSMI: filepath.Join(t.TempDir(), "nvidia-smi"), DisableNVML: true})
	if err != nil || len(samples) != 0 {
		t.Fatalf("sample on a bare host = %v, %v; want nothing and no error", samples, err)
	}
}

func TestFallbackReportsMPSWhenControlPipeListens(t *testing.T) {
	dir, err := os.MkdirTemp("", "mps") // short path: unix socket names are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("unix", filepath.Join(dir, "control"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", dir)
	inv, err := Discover(context.Background(), dgxFallbackOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range inv.Devices {
		if !d.MPS {
			t.Errorf("device %d: MPS false with an MPS control pipe listening", d.Index)
		}
	}
}

func TestParseTopoRejectsMissingRows(t *testing.T) {
	if _, err := parseTopo([]byte("\tGPU0\tGPU1\nGPU0\t X \tNV4\n"), 2); err == nil {
		t.Fatal("a topo matrix without GPU1's row was accepted")
	}
}
