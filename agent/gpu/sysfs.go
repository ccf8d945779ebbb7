package gpu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// PCI vendor ids of the accelerators the sysfs scan recognises.
const (
	pciNVIDIA      = 0x10de
	pciAMD         = 0x1002
	pciTenstorrent = 0x1e52
	pciGoogle      = 0x1ae0
)

// pciModel names a device id and, where it is fixed, its memory.
type pciModel struct {
	name   string
	memory int64
}

const gib = int64(1) << 30

// pciModels names the accelerator device ids worth a name; others are
// reported as "<vendor> device 0x<id>".
var pciModels = map[[2]uint32]pciModel{
	{pciAMD, 0x74a1}:         {"AMD Instinct MI300X", 0},
	{pciAMD, 0x74a5}:         {"AMD Instinct MI325X", 0},
	{pciAMD, 0x740c}:         {"AMD Instinct MI250X/MI250", 0},
	{pciAMD, 0x740f}:         {"AMD Instinct MI210", 0},
	{pciAMD, 0x738c}:         {"AMD Instinct MI100", 0},
	{pciTenstorrent, 0xfaca}: {"Tenstorrent Grayskull", 8 * gib},
	{pciTenstorrent, 0x401e}: {"Tenstorrent Wormhole", 12 * gib},
	{pciTenstorrent, 0xb140}: {"Tenstorrent Blackhole", 32 * gib},
	{pciGoogle, 0x005e}:      {"Google TPU v4", 32 * gib},
	{pciGoogle, 0x0063}:      {"Google TPU v5e", 16 * gib},
	{pciGoogle, 0x0062}:      {"Google TPU v5p", 95 * gib},
	{pciGoogle, 0x006f}:      {"Google TPU v6e", 32 * gib},
}

// pciDevice is one accelerator found under bus/pci/devices.
type pciDevice struct {
	busID  string
	vendor uint32
	device uint32
	class  uint32
	vramB  int64 // amdgpu's mem_info_vram_total, when present
}

// scanPCI lists the accelerators under root/bus/pci/devices, sorted by bus
// id. A missing tree (no sysfs, not Linux) is an empty result, not an error.
func scanPCI(root string) ([]pciDevice, error) {
	dir := filepath.Join(root, "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gpu: scanning %s: %w", dir, err)
	}
	var found []pciDevice
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		vendor, err1 := readHex(filepath.Join(p, "vendor"))
		device, err2 := readHex(filepath.Join(p, "device"))
		class, err3 := readHex(filepath.Join(p, "class"))
		if err := errors.Join(err1, err2, err3); err != nil {
			continue // a device that vanished or is unreadable is not ours to report
		}
		if !isAccelerator(vendor, device, class) {
			continue
		}
		d := pciDevice{busID: strings.ToLower(e.Name()), vendor: vendor, device: device, class: class}
		if vendor == pciAMD {
			if b, err := os.ReadFile(filepath.Join(p, "mem_info_vram_total")); err == nil {
				d.vramB, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			}
		}
		found = append(found, d)
	}
	slices.SortFunc(found, func(a, b pciDevice) int { return strings.Compare(a.busID, b.busID) })
	return found, nil
}

// isAccelerator tells accelerators from the vendors' other functions:
// NVIDIA's NVSwitches and audio, AMD's audio and chipset parts, Google's
// virtual NICs and disks.
func isAccelerator(vendor, device, class uint32) bool {
	base := class >> 16 // PCI base class: 0x03 display, 0x12 processing accelerator
	switch vendor {
	case pciNVIDIA, pciAMD:
		return base == 0x03 || base == 0x12
	case pciTenstorrent:
		return true
	case pciGoogle:
		_, known := pciModels[[2]uint32{vendor, device}]
		return base == 0x12 || known
	}
	return false
}

// readHex reads a sysfs attribute such as "0x10de".
func readHex(path string) (uint32, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return uint32(v), nil
}

// toDevice turns a sysfs find into a Device; the caller sets its index.
func (p pciDevice) toDevice() Device {
	d := Device{PCIBusID: p.busID, Healthy: true}
	switch p.vendor {
	case pciNVIDIA:
		d.Vendor = VendorNVIDIA
	case pciAMD:
		d.Vendor = VendorAMD
	case pciTenstorrent:
		d.Vendor = VendorTenstorrent
	case pciGoogle:
		d.Vendor = VendorGoogle
	}
	if m, ok := pciModels[[2]uint32{p.vendor, p.device}]; ok {
		d.Name, d.MemoryTotal = m.name, m.memory
	} else {
		d.Name = fmt.Sprintf("%s device 0x%04x", d.Vendor, p.device)
	}
	if p.vramB > 0 {
		d.MemoryTotal = p.vramB
	}
	return d
}
