package gpu

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// model is what the fake inventory knows about an accelerator model.
type model struct {
	name    string // as the driver reports it; %d stands for the memory in GB
	vendor  string
	cc      string
	memory  string // default memory when the spec leaves it out
	nvlinks int    // NVLink count between two such devices in one box; 0: PCIe only
}

// models maps the upper-case short name used in specs to the model.
var models = map[string]model{
	"B200":    {"NVIDIA B200", VendorNVIDIA, "10.0", "180GB", 18},
	"H200":    {"NVIDIA H200", VendorNVIDIA, "9.0", "141GB", 18},
	"H100":    {"NVIDIA H100 %dGB HBM3", VendorNVIDIA, "9.0", "80GB", 18},
	"A100":    {"NVIDIA A100-SXM4-%dGB", VendorNVIDIA, "8.0", "80GB", 12},
	"L40S":    {"NVIDIA L40S", VendorNVIDIA, "8.9", "48GB", 0},
	"L4":      {"NVIDIA L4", VendorNVIDIA, "8.9", "24GB", 0},
	"A10G":    {"NVIDIA A10G", VendorNVIDIA, "8.6", "24GB", 0},
	"A10":     {"NVIDIA A10", VendorNVIDIA, "8.6", "24GB", 0},
	"T4":      {"Tesla T4", VendorNVIDIA, "7.5", "16GB", 0},
	"V100":    {"Tesla V100-SXM2-%dGB", VendorNVIDIA, "7.0", "32GB", 6},
	"RTX4090": {"NVIDIA GeForce RTX 4090", VendorNVIDIA, "8.9", "24GB", 0},
	"MI300X":  {"AMD Instinct MI300X", VendorAMD, "", "192GB", 0},
	"MI250X":  {"AMD Instinct MI250X", VendorAMD, "", "128GB", 0},
	"N300":    {"Tenstorrent n300", VendorTenstorrent, "", "24GB", 0},
	"N150":    {"Tenstorrent n150", VendorTenstorrent, "", "12GB", 0},
	"V5E":     {"Google TPU v5e", VendorGoogle, "", "16GB", 0},
	"V5P":     {"Google TPU v5p", VendorGoogle, "", "95GB", 0},
}

var fakeItem = regexp.MustCompile(`^(?:(\d+)\s*[xX]\s*)?([A-Za-z][A-Za-z0-9-]*)(?::(.+))?$`)

// ParseFake builds an inventory from a spec such as "8xH100:80GB" or
// "2xA100:40GB,1xT4:16GB": comma-separated items of [COUNTx]MODEL[:MEMORY].
// COUNT defaults to 1, MEMORY to the model's usual size (binary units, as in
// api.ParseSize: 1GB = 1024³ bytes). Known models get their real driver name, vendor and
// compute capability; unknown models are accepted as NVIDIA devices when
// MEMORY is given. Devices of one NVLink-capable model are linked by
// NVLink, others by PCIe across sockets. The result has Source "fake",
// every device healthy and idle, and deterministic UUIDs and bus ids.
func ParseFake(spec string) (Inventory, error) {
	inv := Inventory{Source: SourceFake, Driver: "550.54.15", CUDA: "12.4"}
	if strings.TrimSpace(spec) == "" {
		return inv, fmt.Errorf("empty spec: write COUNTxMODEL[:MEMORY], like 8xH100:80GB")
	}
	var groups []int // group of each device, to lay out links
	var linked []int // NVLink count of each group
	for gi, raw := range strings.Split(spec, ",") {
		item := strings.TrimSpace(raw)
		m := fakeItem.FindStringSubmatch(item)
		if m == nil {
			return Inventory{}, fmt.Errorf("%q: write COUNTxMODEL[:MEMORY], like 8xH100:80GB", item)
		}
		count := 1
		if m[1] != "" {
			n, err := strconv.Atoi(m[1])
			if err != nil || n < 1 || n > 64 {
				return Inventory{}, fmt.Errorf("%q: count must be between 1 and 64", item)
			}
			count = n
		}
		short := strings.ToUpper(m[2])
		mod, known := models[short]
		if !known {
			if m[3] == "" {
				return Inventory{}, fmt.Errorf("%q: unknown model %s: give its memory, like %s:24GB", item, m[2], m[2])
			}
			mod = model{name: "NVIDIA " + m[2], vendor: VendorNVIDIA}
		}
		memSpec := mod.memory
		if m[3] != "" {
			memSpec = m[3]
		}
		mem, err := parseFakeMemory(memSpec)
		if err != nil {
			return Inventory{}, fmt.Errorf("%q: memory: %w", item, err)
		}
		if mem <= 0 {
			return Inventory{}, fmt.Errorf("%q: memory must be more than zero", item)
		}
		if len(inv.Devices)+count > 64 {
			return Inventory{}, fmt.Errorf("%q: more than 64 devices in one host", spec)
		}
		name := mod.name
		if strings.Contains(name, "%d") {
			name = fmt.Sprintf(name, (mem+gib/2)/gib)
		}
		linked = append(linked, mod.nvlinks)
		for range count {
			i := len(inv.Devices)
			inv.Devices = append(inv.Devices, Device{
				Index:             i,
				UUID:              fmt.Sprintf("GPU-fa4e0000-0000-4000-8000-%012x", i),
				Name:              name,
				Vendor:            mod.vendor,
				MemoryTotal:       mem,
				ComputeCapability: mod.cc,
				PCIBusID:          fmt.Sprintf("0000:%02x:00.0", 0x10+i*0x10),
				Healthy:           true,
			})
			groups = append(groups, gi)
		}
	}
	inv.Links = make([][]Link, len(inv.Devices))
	for i := range inv.Devices {
		inv.Links[i] = make([]Link, len(inv.Devices))
		for j := range inv.Devices {
			switch {
			case i == j:
				inv.Links[i][j] = LinkSelf
			case groups[i] == groups[j] && linked[groups[i]] > 0:
				inv.Links[i][j] = Link(fmt.Sprintf("NV%d", linked[groups[i]]))
			case groups[i] == groups[j]:
				inv.Links[i][j] = LinkNode
			default:
				inv.Links[i][j] = LinkSys
			}
		}
	}
	return inv, nil
}

// staticSource serves a fixed inventory (the fake one).
type staticSource struct{ inv Inventory }

func (s staticSource) Inventory(ctx context.Context) (Inventory, error) {
	return cloneInventory(s.inv), ctx.Err()
}

func (s staticSource) Sample(ctx context.Context) ([]DeviceSample, error) {
	return samplesOf(s.inv), ctx.Err()
}

func (s staticSource) Close() error { return nil }

// samplesOf extracts the changing readings of every device.
func samplesOf(inv Inventory) []DeviceSample {
	out := make([]DeviceSample, len(inv.Devices))
	for i, d := range inv.Devices {
		out[i] = DeviceSample{Index: d.Index, UUID: d.UUID, Utilization: d.Utilization,
			MemoryUsed: d.MemoryUsed, PowerW: d.PowerW, TemperatureC: d.TemperatureC}
	}
	return out
}

// cloneInventory deep-copies inv so callers may change what they get.
func cloneInventory(inv Inventory) Inventory {
	out := inv
	out.Devices = make([]Device, len(inv.Devices))
	for i, d := range inv.Devices {
		d.MIG = append([]MIGInstance(nil), d.MIG...)
		d.XIDErrors = append([]uint64(nil), d.XIDErrors...)
		d.Problems = append([]string(nil), d.Problems...)
		out.Devices[i] = d
	}
	if inv.Links != nil {
		out.Links = make([][]Link, len(inv.Links))
		for i, row := range inv.Links {
			out.Links[i] = append([]Link(nil), row...)
		}
	}
	return out
}

// parseFakeMemory reads "80GB", "512MB", "1.5TB" in binary units, as
// api.ParseSize does; gpu keeps its own copy so that this leaf package
// depends on nothing else in gpud.
func parseFakeMemory(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"TIB", 40}, {"GIB", 30}, {"MIB", 20}, {"TB", 40}, {"GB", 30}, {"MB", 20}} {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || f <= 0 || f > 1<<20 {
				break
			}
			return int64(f * float64(int64(1)<<u.shift)), nil
		}
	}
	return 0, fmt.Errorf("%q is not a memory size: write a number with a unit, like 80GB or 512MB", s)
}
