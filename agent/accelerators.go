package agent

import (
	"gpud.dev/gpud/agent/gpu"
	"gpud.dev/gpud/api"
)

// Accelerators translates agent/gpu's inventory into the wire type; the
// api package may not import gpu, so this is the one place they meet.
func Accelerators(inv gpu.Inventory) api.Accelerators {
	out := api.Accelerators{Source: inv.Source, Driver: inv.Driver, CUDA: inv.CUDA, Devices: make([]api.Accelerator, 0, len(inv.Devices))}
	for _, d := range inv.Devices {
		a := api.Accelerator{
			Index: d.Index, UUID: d.UUID, Name: d.Name, Vendor: d.Vendor,
			MemoryTotal: d.MemoryTotal, MemoryUsed: d.MemoryUsed, ComputeCapability: d.ComputeCapability,
			PCIBusID: d.PCIBusID, MIGEnabled: d.MIGEnabled, MPS: d.MPS, Utilization: d.Utilization,
			TemperatureC: d.TemperatureC, PowerW: d.PowerW, ECCErrors: d.ECCErrors, XIDErrors: d.XIDErrors,
			Healthy: d.Healthy, Problems: d.Problems,
		}
		for _, m := range d.MIG {
			a.MIG = append(a.MIG, api.AcceleratorMIG{Profile: m.Profile, UUID: m.UUID, GPUInstanceID: m.GPUInstanceID,
				ComputeInstanceID: m.ComputeInstanceID, MemoryTotal: m.MemoryTotal})
		}
		out.Devices = append(out.Devices, a)
	}
	for _, row := range inv.Links {
		r := make([]string, len(row))
		for i, l := range row {
			r[i] = string(l)
		}
		out.Links = append(out.Links, r)
	}
	return out
}

// Samples translates device samples into the wire type.
func Samples(in []gpu.DeviceSample) []api.AcceleratorSample {
	out := make([]api.AcceleratorSample, len(in))
	for i, s := range in {
		// The two types are kept field-for-field identical (agent/gpu must not
		// import api); the conversion stops compiling if they drift apart.
		out[i] = api.AcceleratorSample(s)
	}
	return out
}
