//go:build cgo

package gpu

import "context"

func openNVML(context.Context) (Source, error) { return nil, ErrNoNVML }
