package gpu

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"
)

// Open returns the best source for opts: the fake inventory when
// opts.Fake is set, NVML when built with cgo and the library loads, else
// the nvidia-smi and sysfs fallback. A host without accelerators gets a
// source that reports Source "none"; Open fails only on a bad Fake spec.
func Open(ctx context.Context, opts Options) (Source, error) {
	if opts.Fake != "" {
		inv, err := ParseFake(opts.Fake)
		if err != nil {
			return nil, fmt.Errorf("gpu: fake inventory: %w", err)
		}
		return staticSource{inv: inv}, nil
	}
	fb := newFallback(opts)
	if !opts.DisableNVML {
		src, err := openNVML(ctx)
		if err == nil {
			return withSysfs{Source: src, sysfs: fb.sysfs}, nil
		}
		zerolog.Ctx(ctx).Debug().Err(err).Msg("NVML unavailable; reading nvidia-smi and PCI sysfs")
	}
	return fb, nil
}

// withSysfs adds to an NVML inventory the other vendors' accelerators
// that only the PCI sysfs scan finds, so both builds list the same devices.
type withSysfs struct {
	Source
	sysfs string
}

// Inventory is the NVML inventory followed by the sysfs-only devices.
func (w withSysfs) Inventory(ctx context.Context) (Inventory, error) {
	inv, err := w.Source.Inventory(ctx)
	if err != nil {
		return Inventory{}, err
	}
	pci, err := scanPCI(w.sysfs)
	if err != nil {
		return Inventory{}, err
	}
	addSysfsDevices(&inv, pci, "NVML does not list it")
	return inv, nil
}
