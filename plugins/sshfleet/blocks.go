package sshfleet

import (
	"fmt"
	"slices"

	"gpud.dev/gpud/api"
)

// Block is one share of a host that runs can be placed on independently.
type Block struct {
	Index int
	// GPUs are the accelerator indices (Accelerator.Index) of the block,
	// consecutive so a block keeps neighbouring (NVLink-close) devices.
	GPUs   []int
	CPUs   int
	Memory api.Size
}

// SplitBlocks divides a host into blocks as the fleet's `blocks` says:
// N equal blocks (the GPU count must be a multiple of N), auto for one
// block per GPU, and 0 or 1 for the whole host. CPUs and memory are divided
// evenly; a remainder stays unassigned rather than making blocks unequal.
func SplitBlocks(info api.HostInfo, b api.Blocks) ([]Block, error) {
	gpus := make([]int, 0, len(info.Accelerators.Devices))
	for _, d := range info.Accelerators.Devices {
		gpus = append(gpus, d.Index)
	}
	slices.Sort(gpus)
	n := b.N
	if b.Auto {
		n = max(len(gpus), 1)
	}
	if n <= 1 {
		return []Block{{Index: 0, GPUs: gpus, CPUs: info.CPUs, Memory: info.Memory}}, nil
	}
	if len(gpus) > 0 && len(gpus)%n != 0 {
		return nil, fmt.Errorf("blocks: %d does not divide the host's %d GPUs; use a divisor of %d or `blocks: auto`", n, len(gpus), len(gpus))
	}
	if info.CPUs < n {
		return nil, fmt.Errorf("blocks: %d blocks need at least %d CPUs, the host has %d", n, n, info.CPUs)
	}
	per := len(gpus) / n
	blocks := make([]Block, n)
	for i := range blocks {
		blocks[i] = Block{Index: i, GPUs: gpus[i*per : (i+1)*per : (i+1)*per], CPUs: info.CPUs / n, Memory: info.Memory / api.Size(n)}
	}
	return blocks, nil
}
