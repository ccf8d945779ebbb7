//go:build !cgo

package gpu

import "context"

// openNVML is unavailable without cgo: go-nvml loads libnvidia-ml through cgo.
func openNVML(context.Context) (Source, error) { return nil, ErrNoNVML }
