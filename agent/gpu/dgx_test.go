package gpu

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// dgxGPU is one GPU of the captured DGX H100 in testdata/gpu/dgxh100: the
// readings the capture shows, which the NVML mock is set up to report too.
type dgxGPU struct {
	uuid      string
	bus       string // as sysfs writes it
	usedMiB   int64
	util      int
	tempC     int
	powerMW   uint32
	eccErrors uint64
}

var dgxH100 = []dgxGPU{
	{"GPU-6d1a7f3e-0b2c-4a9e-8f51-3c27d9e4b810", "0000:18:00.0", 71234, 98, 63, 612340, 0},
	{"GPU-b42e9c05-71d3-4f68-a2b0-95e1c6d7f322", "0000:2a:00.0", 71234, 97, 61, 598120, 0},
	{"GPU-0f8d3a61-c4e7-4b29-9d15-e6a2b8c34f07", "0000:3a:00.0", 71234, 99, 65, 641900, 0},
	{"GPU-e9573bc2-8a14-4d06-b7f3-1d4c92e06a5b", "0000:5d:00.0", 71234, 96, 60, 587450, 0},
	{"GPU-27c4e8d9-3f61-4a5b-8e02-b9d7a1f45c63", "0000:9a:00.0", 1, 0, 31, 69470, 0},
	{"GPU-8a6f1e34-d9b2-4c07-a5e8-73f0c2b16d94", "0000:ab:00.0", 1, 0, 33, 71050, 2},
	{"GPU-c3d05b7a-1e89-4f2c-b64d-0a8e5f93c7e1", "0000:ba:00.0", 1, 0, 30, 68800, 0},
	{"GPU-54b9a2f7-6c03-4e1d-9a87-f2e6d0b4c158", "0000:db:00.0", 58, 0, 34, 88160, 0},
}

// dgxMIGDevice is GPU 7's MIG layout: two 3g.40gb and one 1g.10gb.
const dgxMIGDevice = 7

var dgxMIG = []MIGInstance{
	{Profile: "3g.40gb", UUID: "MIG-7b0e4c92-5a1d-5f83-b6e2-c91d04a7f3e6", GPUInstanceID: 1, ComputeInstanceID: 0, MemoryTotal: 40320 << 20},
	{Profile: "3g.40gb", UUID: "MIG-2f6a9d13-e8c4-5b07-a3f1-6d5e82c0b947", GPUInstanceID: 2, ComputeInstanceID: 0, MemoryTotal: 40320 << 20},
	{Profile: "1g.10gb", UUID: "MIG-d05c7e2a-4b91-5e36-8c7f-1a3e69f2d084", GPUInstanceID: 9, ComputeInstanceID: 0, MemoryTotal: 9856 << 20},
}

// dgxSocket is the CPU socket each GPU hangs off: 0-3 on 0, 4-7 on 1.
func dgxSocket(i int) int { return i / 4 }

// dgxLink is the captured topology: NVSwitch (18 links) between all GPUs
// except the MIG one, whose NVLinks are off; it reaches the others over PCIe.
func dgxLink(i, j int) Link {
	switch {
	case i == j:
		return LinkSelf
	case i != dgxMIGDevice && j != dgxMIGDevice:
		return "NV18"
	case dgxSocket(i) == dgxSocket(j):
		return LinkNode
	default:
		return LinkSys
	}
}

// wantDGXH100 is the inventory every source must report for the capture.
func wantDGXH100(source string) Inventory {
	inv := Inventory{Source: source, Driver: "550.54.15", CUDA: "12.4"}
	for i, g := range dgxH100 {
		d := Device{
			Index: i, UUID: g.uuid, Name: "NVIDIA H100 80GB HBM3", Vendor: VendorNVIDIA,
			MemoryTotal: 81559 << 20, MemoryUsed: g.usedMiB << 20, ComputeCapability: "9.0",
			PCIBusID: g.bus, Utilization: g.util, TemperatureC: g.tempC,
			PowerW: float64(g.powerMW) / 1000, ECCErrors: g.eccErrors, Healthy: g.eccErrors == 0,
		}
		if g.eccErrors > 0 {
			d.Problems = []string{fmt.Sprintf("%d uncorrected ECC errors since the driver loaded", g.eccErrors)}
		}
		if i == dgxMIGDevice {
			d.MIGEnabled, d.MIG = true, dgxMIG
		}
		inv.Devices = append(inv.Devices, d)
	}
	inv.Links = make([][]Link, len(dgxH100))
	for i := range inv.Links {
		inv.Links[i] = make([]Link, len(dgxH100))
		for j := range inv.Links[i] {
			inv.Links[i][j] = dgxLink(i, j)
		}
	}
	return inv
}

// diffInventory compares two inventories field by field and names every
// difference, so a failing test says which device and field disagree.
func diffInventory(got, want Inventory) []string {
	var diffs []string
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for f := range gv.NumField() {
		name := gv.Type().Field(f).Name
		if name == "Devices" {
			continue
		}
		if !reflect.DeepEqual(gv.Field(f).Interface(), wv.Field(f).Interface()) {
			diffs = append(diffs, fmt.Sprintf("%s: got %v, want %v", name, gv.Field(f), wv.Field(f)))
		}
	}
	if len(got.Devices) != len(want.Devices) {
		return append(diffs, fmt.Sprintf("got %d devices, want %d", len(got.Devices), len(want.Devices)))
	}
	for i := range got.Devices {
		g, w := reflect.ValueOf(got.Devices[i]), reflect.ValueOf(want.Devices[i])
		for f := range g.NumField() {
			if !reflect.DeepEqual(g.Field(f).Interface(), w.Field(f).Interface()) {
				diffs = append(diffs, fmt.Sprintf("device %d %s: got %#v, want %#v",
					i, g.Type().Field(f).Name, g.Field(f).Interface(), w.Field(f).Interface()))
			}
		}
	}
	return diffs
}

// requireSameInventory fails the test with every difference listed.
func requireSameInventory(t testing.TB, got, want Inventory) {
	t.Helper()
	if diffs := diffInventory(got, want); len(diffs) > 0 {
		t.Fatalf("inventory differs in %d fields:\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
}

// testdataDir is the shared fixtures directory for this package.
func testdataDir(parts ...string) string {
	return filepath.Join(append([]string{"..", "..", "testdata", "gpu"}, parts...)...)
}

// dgxFallbackOptions points the fallback at the DGX H100 capture and its
// sysfs tree, with NVML switched off.
func dgxFallbackOptions() Options {
	smi, _ := filepath.Abs(testdataDir("dgxh100", "nvidia-smi"))
	return Options{NvidiaSMI: smi, SysfsRoot: testdataDir("dgxh100", "sysfs"), DisableNVML: true}
}
