package api

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// GPU vendors, as gpud names them. The shorthand also accepts dstack's
// spellings "google" (for tpu) and "tenstorrent" (for tt).
const (
	VendorNVIDIA = "nvidia"
	VendorAMD    = "amd"
	VendorTPU    = "tpu"
	VendorIntel  = "intel"
	VendorTT     = "tt"
)

// vendorAlias maps a vendor as written to gpud's name for it, or "".
func vendorAlias(s string) string {
	switch strings.ToLower(s) {
	case "nvidia":
		return VendorNVIDIA
	case "amd":
		return VendorAMD
	case "tpu", "google":
		return VendorTPU
	case "intel":
		return VendorIntel
	case "tt", "tenstorrent":
		return VendorTT
	}
	return ""
}

// GPUSpec is a request for accelerators. An empty Vendor or Names matches
// any. Count is how many devices; when Fraction is set, Count is exactly 1
// and the job gets that share of one device (gpud's fractional GPUs), and
// MemoryShare, when set, is the device memory it may use instead.
type GPUSpec struct {
	Vendor            string      `json:"vendor,omitempty"`
	Names             []string    `json:"name,omitempty"`
	Count             Range[int]  `json:"count"`
	Memory            Range[Size] `json:"memory,omitzero"`
	TotalMemory       Range[Size] `json:"total_memory,omitzero"`
	ComputeCapability string      `json:"compute_capability,omitempty"`
	Fraction          float64     `json:"fraction,omitempty"`
	MemoryShare       SizeSpec    `json:"memory_share,omitempty"`
}

// Fractional reports whether the request is for part of one device.
func (g GPUSpec) Fractional() bool { return g.Fraction > 0 || g.MemoryShare > 0 }

// ParseGPU reads dstack's GPU shorthand: colon-separated tokens in any
// order — a vendor (nvidia, amd, tpu, intel, tt), comma-separated names
// (A100,H100), memory with a unit or a range (24GB, 40GB..80GB), a count or
// a range (2, 1..8) — plus gpud's fractions (0.5, H100:0.25). A name without
// a count means one device.
func ParseGPU(s string) (GPUSpec, error) {
	var g GPUSpec
	var haveCount, haveMem bool
	tokens := strings.Split(strings.TrimSpace(s), ":")
	for i, raw := range tokens {
		tok := strings.TrimSpace(raw)
		last := i == len(tokens)-1
		switch {
		case tok == "":
			return g, fmt.Errorf("%q has an empty part: write tokens like H100:80GB:8, separated by single colons", s)
		case vendorAlias(tok) != "":
			if g.Vendor != "" {
				return g, fmt.Errorf("%q names two vendors: keep one of nvidia, amd, tpu, intel, tt", s)
			}
			g.Vendor = vendorAlias(tok)
		case isSizeToken(tok):
			if haveMem {
				return g, fmt.Errorf("%q gives the memory twice: write one memory, like 80GB or 40GB..80GB", s)
			}
			r, err := ParseRange(tok, ParseSize)
			if err != nil {
				return g, err
			}
			g.Memory, haveMem = r, true
		case isCountToken(tok):
			if haveCount {
				return g, fmt.Errorf("%q gives the count twice: write one count, like 8 or 1..8", s)
			}
			if err := g.setCount(tok); err != nil {
				return g, err
			}
			haveCount = true
		default:
			if len(g.Names) > 0 {
				if last && !haveCount {
					return g, fmt.Errorf("%q: count must be a number or range like 2 or 1..8", s)
				}
				return g, fmt.Errorf("%q gives names twice: list alternatives in one token, like A100,H100", s)
			}
			for n := range strings.SplitSeq(tok, ",") {
				n = strings.TrimSpace(n)
				if !validGPUName(n) {
					return g, fmt.Errorf("%q is not a GPU name: use names like H100, MI300X or v5litepod-8, separated by commas", n)
				}
				g.Names = append(g.Names, n)
			}
		}
	}
	if !haveCount {
		g.Count = Exact(1)
	}
	return g, g.check()
}

func isSizeToken(tok string) bool {
	u := strings.ToUpper(tok)
	for _, part := range strings.Split(u, "..") {
		for _, unit := range []string{"MB", "GB", "TB", "MIB", "GIB", "TIB"} {
			if strings.HasSuffix(part, unit) {
				return true
			}
		}
	}
	return false
}

func isCountToken(tok string) bool {
	c := tok[0]
	return (c >= '0' && c <= '9') || c == '.'
}

// setCount reads a count token: a whole number, a range, or a fraction below 1.
func (g *GPUSpec) setCount(tok string) error {
	if !strings.Contains(tok, "..") && strings.Contains(tok, ".") {
		f, err := strconv.ParseFloat(tok, 64)
		if err != nil || f <= 0 || f >= 1 {
			return fmt.Errorf("%q: count must be a whole number, a range like 1..8, or a fraction of one GPU between 0 and 1 like 0.5", tok)
		}
		g.Count, g.Fraction = Exact(1), f
		return nil
	}
	r, err := ParseRange(tok, parseOne[int])
	if err != nil {
		return fmt.Errorf("%q: count must be a number or range like 2 or 1..8", tok)
	}
	g.Count = r
	return nil
}

func validGPUName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, c := range n {
		ok := c == '-' || c == '_' || c == '.' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !ok {
			return false
		}
	}
	return true
}

// vendorOf infers the vendor of a GPU name, or "" when it cannot tell.
func vendorOf(name string) string {
	n := strings.ToLower(name)
	switch {
	case isTPUName(n):
		return VendorTPU
	case strings.HasPrefix(n, "mi") && len(n) > 2 && n[2] >= '0' && n[2] <= '9',
		strings.HasPrefix(n, "radeon"), strings.HasPrefix(n, "instinct"):
		return VendorAMD
	case strings.HasPrefix(n, "tt-"), n == "n150", n == "n300", n == "p150", n == "p100a", strings.HasPrefix(n, "wormhole"), strings.HasPrefix(n, "blackhole"):
		return VendorTT
	case strings.HasPrefix(n, "gaudi"):
		return VendorIntel
	}
	return VendorNVIDIA
}

// isTPUName matches Google TPU names: v2-8, v5litepod-4, tpu-v5e-8.
func isTPUName(n string) bool {
	n = strings.TrimPrefix(n, "tpu-")
	return len(n) >= 2 && n[0] == 'v' && n[1] >= '0' && n[1] <= '9'
}

// check validates a GPU spec built from either form and infers its vendor.
func (g *GPUSpec) check() error {
	if len(g.Names) > 0 {
		inferred := ""
		for _, n := range g.Names {
			v := vendorOf(n)
			if inferred != "" && v != inferred {
				return fmt.Errorf("names %s belong to different vendors: request one vendor per GPU spec", strings.Join(g.Names, ","))
			}
			inferred = v
		}
		switch {
		case g.Vendor == "":
			g.Vendor = inferred
		case g.Vendor != inferred && inferred != VendorNVIDIA:
			return fmt.Errorf("%s is not a %s GPU: drop the vendor or change the name", g.Names[0], g.Vendor)
		}
	}
	if g.Fraction < 0 || g.Fraction >= 1 {
		return errors.New("fraction must be between 0 and 1: write 0.5 for half a GPU, or a whole count")
	}
	if g.Fractional() {
		if g.Fraction > 0 && g.MemoryShare > 0 {
			return errors.New("fraction and memory_share both set: choose one way to share a GPU")
		}
		if g.Count.Min == nil || g.Count.Max == nil || *g.Count.Min != 1 || *g.Count.Max != 1 {
			return errors.New("a fractional GPU shares one device: set count to 1")
		}
	}
	if g.Count.Max != nil && *g.Count.Max > 1024 {
		return fmt.Errorf("%d GPUs is more than any node holds: count must be at most 1024", *g.Count.Max)
	}
	return nil
}

// gpu reads resources.gpu in the shorthand or the long form.
func (d *decoder) gpu(n ast.Node, path string) (GPUSpec, bool) {
	if !d.isMap(n) {
		return value(d, n, path, ParseGPU)
	}
	var g GPUSpec
	var countSet bool
	present := d.object(n, path, "a GPU spec", fields{
		"vendor": func(n ast.Node, p string) {
			if s, ok := d.oneOf(n, p, "nvidia", "amd", "tpu", "intel", "tt", "google", "tenstorrent"); ok {
				g.Vendor = vendorAlias(s)
			}
		},
		"name": func(n ast.Node, p string) {
			var names []string
			if d.isSeq(n) {
				names = d.strList(n, p)
			} else if s, ok := d.str(n, p); ok && s != "" {
				names = strings.Split(s, ",")
			}
			for _, name := range names {
				name = strings.TrimSpace(name)
				if !validGPUName(name) {
					d.errorAt(n, p, fmt.Sprintf("%q is not a GPU name", name), "use names like H100, MI300X or v5litepod-8")
					continue
				}
				g.Names = append(g.Names, name)
			}
		},
		"count": func(n ast.Node, p string) {
			s, ok := d.str(n, p)
			if !ok {
				return
			}
			var tmp GPUSpec
			if err := tmp.setCount(strings.TrimSpace(s)); err != nil || strings.TrimSpace(s) == "" {
				d.errorAt(n, p, fmt.Sprintf("%q: count must be a number or range like 2 or 1..8", s), "")
				return
			}
			g.Count, countSet = tmp.Count, true
			if tmp.Fraction > 0 {
				g.Fraction = tmp.Fraction
			}
		},
		"memory":       func(n ast.Node, p string) { g.Memory, _ = d.sizeRange(n, p) },
		"total_memory": func(n ast.Node, p string) { g.TotalMemory, _ = d.sizeRange(n, p) },
		"compute_capability": func(n ast.Node, p string) {
			g.ComputeCapability, _ = value(d, n, p, func(s string) (string, error) {
				if _, err := strconv.ParseFloat(s, 64); err != nil {
					return "", fmt.Errorf("%q is not a compute capability: write major.minor, like 8.0", s)
				}
				return s, nil
			})
		},
		"fraction": func(n ast.Node, p string) {
			if f, ok := d.number(n, p); ok {
				if f <= 0 || f >= 1 {
					d.errorAt(n, p, "fraction must be between 0 and 1", "write 0.5 for half a GPU")
				}
				g.Fraction = f
			}
		},
		"memory_share": func(n ast.Node, p string) { g.MemoryShare, _ = d.size(n, p) },
	})
	if present == nil {
		return g, false
	}
	if !countSet {
		g.Count = Exact(1)
	}
	if err := g.check(); err != nil {
		msg, fix := splitFix(err)
		d.errorAt(n, path, msg, fix)
		return g, false
	}
	return g, true
}
