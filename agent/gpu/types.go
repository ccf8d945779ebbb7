// Package gpu owns accelerator discovery and sampling on one host: which
// GPUs (and other accelerators) the host has, how they are connected, how
// they are partitioned (MIG, MPS), and how busy and healthy they are now.
//
// Sources, tried in order by Open: a fake inventory (Options.Fake), NVML
// through go-nvml when the binary is built with cgo and libnvidia-ml loads,
// and finally nvidia-smi plus a PCI sysfs scan, which also finds AMD,
// Tenstorrent and Google TPU devices. Every source fills the same fields, so
// callers never care which one answered.
//
// gpu must not import daemon, store, sched, plugins, proxy, nor any other
// part of agent: it is a leaf that the agent, the simulator and tests use.
package gpu

import (
	"context"
	"errors"
	"strings"
)

// Source names reported in Inventory.Source.
const (
	SourceNVML      = "nvml"
	SourceNvidiaSMI = "nvidia-smi"
	SourceSysfs     = "sysfs"
	SourceFake      = "fake"
	SourceNone      = "none"
)

// Vendor names reported in Device.Vendor.
const (
	VendorNVIDIA      = "nvidia"
	VendorAMD         = "amd"
	VendorTenstorrent = "tenstorrent"
	VendorGoogle      = "tpu"
)

// Inventory is everything a host's accelerators report, from any source.
// A host with no accelerator has Source "none" and no devices; that is not
// an error.
type Inventory struct {
	Source  string   `json:"source"`
	Driver  string   `json:"driver,omitempty"` // e.g. "550.54.15"
	CUDA    string   `json:"cuda,omitempty"`   // driver's CUDA version, e.g. "12.4"
	Devices []Device `json:"devices"`
	// Links[i][j] says how device i reaches device j (indices into
	// Devices); Links[i][i] is LinkSelf. Nil when the source cannot tell.
	Links [][]Link `json:"links,omitempty"`
}

// Device is one physical accelerator. Fields a source cannot read stay at
// their zero value; Index, Name and Vendor are always set, MemoryTotal is
// set for every NVIDIA device and for other vendors' known models.
type Device struct {
	Index             int           `json:"index"`
	UUID              string        `json:"uuid,omitempty"`
	Name              string        `json:"name"` // as the driver reports it, e.g. "NVIDIA H100 80GB HBM3"
	Vendor            string        `json:"vendor"`
	MemoryTotal       int64         `json:"memory_total"`                 // bytes
	MemoryUsed        int64         `json:"memory_used"`                  // bytes
	ComputeCapability string        `json:"compute_capability,omitempty"` // "9.0"
	PCIBusID          string        `json:"pci_bus_id,omitempty"`         // "0000:1b:00.0", lower case, 4-digit domain
	MIGEnabled        bool          `json:"mig_enabled,omitempty"`
	MIG               []MIGInstance `json:"mig,omitempty"`
	MPS               bool          `json:"mps,omitempty"` // an MPS control daemon serves this device
	Utilization       int           `json:"utilization"`   // percent, 0..100
	TemperatureC      int           `json:"temperature_c"`
	PowerW            float64       `json:"power_w"`
	ECCErrors         uint64        `json:"ecc_errors"` // volatile uncorrected ECC errors since driver load
	// XIDErrors lists critical XID codes seen since the source opened;
	// nvidia-smi cannot report them, so the fallback leaves it empty.
	XIDErrors []uint64 `json:"xid_errors,omitempty"`
	Healthy   bool     `json:"healthy"`
	// Problems explains, in words, why Healthy is false.
	Problems []string `json:"problems,omitempty"`
}

// MIGInstance is one MIG GPU instance (with its compute instance) carved
// out of a device: what a job can be given instead of the whole device.
type MIGInstance struct {
	Profile           string `json:"profile"` // "1g.10gb", "3g.40gb", ...
	UUID              string `json:"uuid,omitempty"`
	GPUInstanceID     int    `json:"gpu_instance_id"`
	ComputeInstanceID int    `json:"compute_instance_id"`
	MemoryTotal       int64  `json:"memory_total"` // bytes
}

// Link is how one device reaches another, in nvidia-smi topo's vocabulary.
type Link string

// Links from best to worst.
const (
	LinkSelf   Link = "X"    // the device itself
	LinkNVLink Link = "NV"   // NVLink; with a count it reads "NV18"
	LinkPIX    Link = "PIX"  // at most one PCIe switch between them
	LinkPXB    Link = "PXB"  // several PCIe switches, no host bridge
	LinkPHB    Link = "PHB"  // through one PCIe host bridge
	LinkNode   Link = "NODE" // host bridges within one NUMA node
	LinkSys    Link = "SYS"  // across CPU sockets (SMP interconnect)
)

// IsNVLink reports whether l is an NVLink connection ("NV" or "NV<n>").
func (l Link) IsNVLink() bool { return strings.HasPrefix(string(l), "NV") }

// DeviceSample is one fresh reading of a device's load, for metrics.
type DeviceSample struct {
	Index        int     `json:"index"`
	UUID         string  `json:"uuid,omitempty"`
	Utilization  int     `json:"utilization"` // percent
	MemoryUsed   int64   `json:"memory_used"` // bytes
	PowerW       float64 `json:"power_w"`
	TemperatureC int     `json:"temperature_c"`
}

// Options chooses and configures the discovery source. The zero value
// discovers the real host.
type Options struct {
	// Fake, when set, is a spec such as "8xH100:80GB" or
	// "2xA100:40GB,1xT4:16GB"; no hardware is read (see ParseFake).
	Fake string
	// SysfsRoot is the root under which bus/pci/devices is scanned;
	// default "/sys". Tests point it at a fake tree.
	SysfsRoot string
	// NvidiaSMI is the nvidia-smi executable; default "nvidia-smi" on PATH.
	NvidiaSMI string
	// DisableNVML skips NVML even in a cgo build (tests of the fallback).
	DisableNVML bool
}

// Source reads one host's accelerators. A Source is safe for concurrent
// use; Close releases it (for NVML, the library handle).
type Source interface {
	// Inventory reports every device with its current readings.
	Inventory(ctx context.Context) (Inventory, error)
	// Sample reads only what changes (utilization, memory, power,
	// temperature); it is cheap enough to call every few seconds.
	Sample(ctx context.Context) ([]DeviceSample, error)
	// Close releases the source; later calls fail.
	Close() error
}

// ErrNoNVML means NVML is not usable here: built without cgo, or
// libnvidia-ml is not installed. Open falls back to nvidia-smi and sysfs.
var ErrNoNVML = errors.New("gpu: NVML not available")

// Discover opens the best source for opts, reads the inventory once and
// closes the source. Use Open for repeated sampling.
func Discover(ctx context.Context, opts Options) (Inventory, error) {
	src, err := Open(ctx, opts)
	if err != nil {
		return Inventory{}, err
	}
	defer src.Close()
	return src.Inventory(ctx)
}

// Sample opens the best source for opts, reads one sample and closes it.
// Use Open and Source.Sample for repeated sampling.
func Sample(ctx context.Context, opts Options) ([]DeviceSample, error) {
	src, err := Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return src.Sample(ctx)
}
