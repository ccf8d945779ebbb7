package gpu

import (
	"context"
	"errors"
)

// fallback reads nvidia-smi and the PCI sysfs tree.
type fallback struct{ opts Options }

func newFallback(opts Options) *fallback { return &fallback{opts: opts} }

func (f *fallback) Inventory(ctx context.Context) (Inventory, error) {
	return Inventory{Source: SourceNone}, errors.New("not yet")
}

func (f *fallback) Sample(ctx context.Context) ([]DeviceSample, error) { return nil, nil }

func (f *fallback) Close() error { return nil }
