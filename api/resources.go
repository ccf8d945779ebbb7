package api

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// Resources is what one job (one node of a task, one replica of a service)
// needs, with dstack's defaults: cpu "2..", memory "8GB..", disk "100GB..",
// and no GPU requirement (gpu count "0..") when gpu is not given.
type Resources struct {
	CPU     CPUSpec     `json:"cpu"`
	Memory  Range[Size] `json:"memory"`
	SHMSize SizeSpec    `json:"shm_size,omitempty"`
	GPU     GPUSpec     `json:"gpu"`
	Disk    DiskSpec    `json:"disk"`
}

// CPUSpec is a number of CPU cores, optionally of one architecture.
type CPUSpec struct {
	Arch  string     `json:"arch,omitempty"` // "x86" or "arm"; empty means any
	Count Range[int] `json:"count"`
}

// DiskSpec is the size of the job's root disk.
type DiskSpec struct {
	Size Range[Size] `json:"size"`
}

// Default resources, as in dstack.
const (
	defaultCPU    = 2
	defaultMemory = 8 * GB
	defaultDisk   = 100 * GB
)

// isResourceKey reports whether key is a field of resources; seen at the
// top level of a run it is almost always mis-indented.
func isResourceKey(key string) bool {
	switch key {
	case "cpu", "memory", "gpu", "disk", "shm_size":
		return true
	}
	return false
}

func (r *Resources) setDefaults() {
	if r.CPU.Count.IsZero() {
		r.CPU.Count = AtLeast(defaultCPU)
	}
	if r.Memory.IsZero() {
		r.Memory = AtLeast(defaultMemory)
	}
	if r.Disk.Size.IsZero() {
		r.Disk.Size = AtLeast(defaultDisk)
	}
	if r.GPU.Count.IsZero() {
		r.GPU.Count = AtLeast(0)
	}
}

// resources reads a resources mapping. It is decoded once per job shape
// (replica groups, node groups), so its fields are a switch, not a map.
func (d *decoder) resources(n ast.Node, path string) Resources {
	var r Resources
	d.objectWith(n, path, "resources", func(key string, n ast.Node, p string) bool {
		switch key {
		case "cpu":
			r.CPU, _ = d.cpu(n, p)
		case "memory":
			r.Memory, _ = d.sizeRange(n, p)
		case "shm_size":
			r.SHMSize, _ = d.size(n, p)
		case "gpu":
			r.GPU, _ = d.gpu(n, p)
		case "disk":
			if d.isMap(n) {
				d.objectWith(n, p, "a disk spec", func(key string, n ast.Node, p string) bool {
					if key != "size" {
						return false
					}
					r.Disk.Size, _ = d.sizeRange(n, p)
					return true
				}, func() []string { return []string{"size"} })
				break
			}
			r.Disk.Size, _ = d.sizeRange(n, p)
		default:
			return false
		}
		return true
	}, func() []string { return []string{"cpu", "disk", "gpu", "memory", "shm_size"} })
	return r
}

// archAlias maps an architecture as written to "x86" or "arm", or "".
func archAlias(s string) string {
	switch strings.ToLower(s) {
	case "x86", "x86_64", "amd64":
		return "x86"
	case "arm", "arm64", "aarch64":
		return "arm"
	}
	return ""
}

// ParseCPU reads a CPU spec: a count or range ("16", "2..", "..64"),
// optionally with an architecture in either order ("x86:16", "arm:8..").
func ParseCPU(s string) (CPUSpec, error) {
	var c CPUSpec
	tokens := strings.Split(strings.TrimSpace(s), ":")
	if len(tokens) > 2 {
		return c, fmt.Errorf("%q has too many parts: write a count, or an architecture and a count, like x86:16", s)
	}
	for _, tok := range tokens {
		tok = strings.TrimSpace(tok)
		if a := archAlias(tok); a != "" {
			if c.Arch != "" {
				return c, fmt.Errorf("%q names two architectures: keep one of x86, arm", s)
			}
			c.Arch = a
			continue
		}
		if !c.Count.IsZero() {
			return c, fmt.Errorf("%q: the architecture must be x86 or arm, like x86:16", s)
		}
		r, err := ParseRange(tok, parseOne[int])
		if err != nil {
			return c, fmt.Errorf("%q: cpu must be a count or range like 16 or 2.., optionally with an architecture like arm:8", s)
		}
		c.Count = r
	}
	return c, nil
}

func (d *decoder) cpu(n ast.Node, path string) (CPUSpec, bool) {
	if !d.isMap(n) {
		return value(d, n, path, ParseCPU)
	}
	var c CPUSpec
	d.object(n, path, "a cpu spec", fields{
		"arch": func(n ast.Node, p string) {
			if s, ok := d.oneOf(n, p, "x86", "arm", "x86_64", "amd64", "arm64", "aarch64"); ok {
				c.Arch = archAlias(s)
			}
		},
		"count": func(n ast.Node, p string) { c.Count, _ = d.countRange(n, p) },
	})
	return c, true
}
