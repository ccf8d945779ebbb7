package gpu

import (
	"context"
	"errors"
	"io/fs"
	"os/exec"

	"github.com/rs/zerolog"
)

// fallback reads nvidia-smi and the PCI sysfs tree: what a CGO_ENABLED=0
// build, or a host whose NVML will not load, uses. Safe for concurrent
// use: it holds no state between calls.
type fallback struct {
	smi   smi
	sysfs string
}

func newFallback(opts Options) *fallback {
	f := &fallback{smi: smi{path: opts.NvidiaSMI}, sysfs: opts.SysfsRoot}
	if f.smi.path == "" {
		f.smi.path = "nvidia-smi"
	}
	if f.sysfs == "" {
		f.sysfs = "/sys"
	}
	return f
}

// Inventory takes NVIDIA devices from nvidia-smi and every other
// accelerator from sysfs, numbered after them. NVIDIA devices that sysfs
// sees but nvidia-smi cannot report (no driver, no tool) are listed as
// unhealthy so the host's true contents stay visible.
func (f *fallback) Inventory(ctx context.Context) (Inventory, error) {
	pci, err := scanPCI(f.sysfs)
	if err != nil {
		return Inventory{}, err
	}
	inv, smiErr := f.smi.inventory(ctx)
	if smiErr != nil {
		if err := ctx.Err(); err != nil {
			return Inventory{}, err
		}
		inv = Inventory{Source: SourceNone}
	}
	mps := mpsActive()
	for i := range inv.Devices {
		inv.Devices[i].MPS = mps
		judgeHealth(&inv.Devices[i])
	}
	if smiErr != nil {
		zerolog.Ctx(ctx).Debug().Err(smiErr).Msg("nvidia-smi gave no inventory; using PCI sysfs only")
	}
	addSysfsDevices(&inv, pci, "nvidia-smi cannot report it: "+smiProblem(smiErr))
	return inv, nil
}

// addSysfsDevices appends the accelerators only sysfs knows about, numbered
// after those already in inv. NVIDIA devices are added only when inv has
// none (the driver or its tools failed; unreported says how): they are
// listed as unhealthy so the host's true contents stay visible. Source becomes
// "sysfs" when sysfs alone found something, "none" when nothing was found.
func addSysfsDevices(inv *Inventory, pci []pciDevice, unreported string) {
	known := len(inv.Devices)
	for _, p := range pci {
		if p.vendor == pciNVIDIA && known > 0 {
			continue // already reported, with more detail
		}
		d := p.toDevice()
		d.Index = len(inv.Devices)
		if p.vendor == pciNVIDIA {
			d.Healthy = false
			d.Problems = append(d.Problems, unreported)
		}
		inv.Devices = append(inv.Devices, d)
	}
	switch {
	case known == 0 && len(inv.Devices) > 0:
		inv.Source = SourceSysfs
	case known == 0:
		inv.Source = SourceNone
	}
	if inv.Devices == nil {
		inv.Devices = []Device{}
	}
	inv.Links = widenLinks(inv.Links, len(inv.Devices))
}

// smiProblem says briefly why nvidia-smi gave nothing.
func smiProblem(err error) string {
	if smiMissing(err) {
		return "nvidia-smi is not installed"
	}
	if err == nil {
		return "it lists no devices"
	}
	return err.Error()
}

// widenLinks extends the NVIDIA links matrix to n devices. Devices only
// sysfs knows reach the others across the system (SYS): nothing better is
// known about them. Without an NVIDIA matrix there is none to widen.
func widenLinks(links [][]Link, n int) [][]Link {
	if links == nil || len(links) == n {
		return links
	}
	out := make([][]Link, n)
	for i := range n {
		out[i] = make([]Link, n)
		for j := range n {
			switch {
			case i == j:
				out[i][j] = LinkSelf
			case i < len(links) && j < len(links):
				out[i][j] = links[i][j]
			default:
				out[i][j] = LinkSys
			}
		}
	}
	return out
}

// Sample reads NVIDIA devices through nvidia-smi; other vendors have no
// sampler yet and are left out. A host without nvidia-smi samples nothing.
func (f *fallback) Sample(ctx context.Context) ([]DeviceSample, error) {
	samples, err := f.smi.sample(ctx)
	if smiMissing(err) {
		return []DeviceSample{}, nil
	}
	return samples, err
}

// Close does nothing: the fallback holds no resources.
func (f *fallback) Close() error { return nil }

// smiMissing reports whether err means there is no nvidia-smi to run.
func smiMissing(err error) bool {
	return errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)
}
