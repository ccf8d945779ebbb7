package gpu

import (
	"context"
	"fmt"
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
	if !opts.DisableNVML {
		if src, err := openNVML(ctx); err == nil {
			return src, nil
		}
	}
	return newFallback(opts), nil
}
