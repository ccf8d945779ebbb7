package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// criticalXID reports whether an XID code points at the device or driver
// rather than at the application that ran on it (13, 31, 43 and 45 are a
// program's own faults and leave the device usable).
func criticalXID(code uint64) bool {
	switch code {
	case 13, 31, 43, 45:
		return false
	}
	return true
}

// judgeHealth sets Healthy and Problems from the error counters a source
// filled in: uncorrected ECC errors or a critical XID make a device unhealthy.
func judgeHealth(d *Device) {
	if d.ECCErrors > 0 {
		d.Problems = append(d.Problems, fmt.Sprintf("%d uncorrected ECC errors since the driver loaded", d.ECCErrors))
	}
	for _, x := range d.XIDErrors {
		d.Problems = append(d.Problems, fmt.Sprintf("XID %d", x))
	}
	d.Healthy = len(d.Problems) == 0
}

// mpsActive reports whether an MPS control daemon listens on this host:
// its control pipe lives in CUDA_MPS_PIPE_DIRECTORY, default
// /tmp/nvidia-mps. NVML has no query for it.
func mpsActive() bool {
	dir := os.Getenv("CUDA_MPS_PIPE_DIRECTORY")
	if dir == "" {
		dir = "/tmp/nvidia-mps"
	}
	_, err := os.Stat(filepath.Join(dir, "control"))
	return err == nil
}

// normalizeBusID writes a PCI address as sysfs does: lower case with a
// 4-digit domain ("00000000:1B:00.0" becomes "0000:1b:00.0").
func normalizeBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	if domain, rest, ok := strings.Cut(id, ":"); ok && len(domain) > 4 {
		id = domain[len(domain)-4:] + ":" + rest
	}
	return id
}
