package agent

import (
	"context"
	"fmt"

	"gpud.dev/gpud/agent/host"
	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/api"
)

// Host describes the machine: hardware, OS, addresses, Docker, the runtime
// in use and a fresh accelerator inventory.
func (a *Agent) Host(ctx context.Context) (api.HostInfo, error) {
	h, err := host.Info(a.cfg.DataDir)
	if err != nil {
		return api.HostInfo{}, err
	}
	h.Docker, h.Runtime, h.AgentVersion = a.cfg.Docker, a.rt.Name(), a.cfg.Version
	h.AllowPrivileged, h.Pythons = a.cfg.AllowPrivileged, pythonsOf(a.rt)
	h.VolumePrefixes, h.VolumeDenied = a.cfg.Volumes.Prefixes, a.cfg.Volumes.Denied
	h.Accelerators = api.Accelerators{Source: "none", Devices: []api.Accelerator{}}
	if a.cfg.GPUs != nil {
		inv, err := a.cfg.GPUs.Inventory(ctx)
		if err != nil {
			return api.HostInfo{}, fmt.Errorf("accelerators: %w", err)
		}
		h.Accelerators = Accelerators(inv)
	}
	return h, nil
}

// AcceleratorSamples reads the current load of every device (nil without
// accelerators).
func (a *Agent) AcceleratorSamples(ctx context.Context) ([]api.AcceleratorSample, error) {
	if a.cfg.GPUs == nil {
		return nil, nil
	}
	s, err := a.cfg.GPUs.Sample(ctx)
	if err != nil {
		return nil, fmt.Errorf("accelerators: %w", err)
	}
	return Samples(s), nil
}

// pythonRuntime is a runtime whose jobs use the host's Python
// interpreters (the process runtime, alone or in a mixed runtime).
type pythonRuntime interface {
	// Pythons lists the versions ("3.11") a job may ask for.
	Pythons() []string
}

// pythonsOf is what rt's jobs can have of `python: "3.X"` on this host
// (nil for Docker alone, whose jobs get Python from their image).
func pythonsOf(rt runtime.Runtime) []string {
	if u, ok := rt.(unprivileged); ok {
		rt = u.Runtime
	}
	if p, ok := rt.(pythonRuntime); ok {
		return p.Pythons()
	}
	return nil
}
