//go:build cgo

package gpu

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// openNVML opens the system's libnvidia-ml; it fails with ErrNoNVML where
// the library or driver is missing.
func openNVML(ctx context.Context) (Source, error) {
	src, err := NewNVML(ctx, nvml.New())
	if err != nil {
		return nil, err
	}
	return src, nil
}

// NVMLSource reads devices through an NVML library handle. It is what Open
// returns on NVIDIA hosts when built with cgo; tests build one on go-nvml's
// mock servers. Safe for concurrent use.
type NVMLSource struct {
	lib     nvml.Interface
	devices []nvml.Device // by index, fixed while the library is loaded
	events  nvml.EventSet // nil when XID events are not supported

	mu     sync.Mutex
	closed bool
	xids   map[int][]uint64 // device index -> critical XIDs seen, in order
}

// NewNVML initialises lib and opens a source on it. Errors wrap ErrNoNVML
// when lib cannot be initialised (no library, no driver), so callers can
// fall back. The caller must Close the source.
func NewNVML(ctx context.Context, lib nvml.Interface) (*NVMLSource, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: init: %w", ErrNoNVML, ret)
	}
	s := &NVMLSource{lib: lib, xids: map[int][]uint64{}}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("gpu: nvml device count: %w", ret)
	}
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			lib.Shutdown()
			return nil, fmt.Errorf("gpu: nvml device %d: %w", i, ret)
		}
		s.devices = append(s.devices, d)
	}
	s.watchXID()
	return s, nil
}

// watchXID registers every device that supports it for critical XID
// events, so Inventory can report them; without support XIDs stay empty.
func (s *NVMLSource) watchXID() {
	es, ret := s.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return
	}
	registered := false
	for _, d := range s.devices {
		types, ret := d.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || types&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		if d.RegisterEvents(nvml.EventTypeXidCriticalError, es) == nvml.SUCCESS {
			registered = true
		}
	}
	if !registered {
		es.Free()
		return
	}
	s.events = es
}

// drainXID collects the XID events queued since the last call. The
// caller holds s.mu.
func (s *NVMLSource) drainXID() {
	if s.events == nil {
		return
	}
	for range 1024 { // bound the loop against a storm of events
		ev, ret := s.events.Wait(0)
		if ret != nvml.SUCCESS {
			return
		}
		if ev.EventType&nvml.EventTypeXidCriticalError == 0 || !criticalXID(ev.EventData) {
			continue
		}
		idx := -1
		if ev.Device != nil {
			if i, ret := ev.Device.GetIndex(); ret == nvml.SUCCESS {
				idx = i
			}
		}
		seen := s.xids[idx]
		if !slices.Contains(seen, ev.EventData) && len(seen) < 16 {
			s.xids[idx] = append(seen, ev.EventData)
		}
	}
}

// Inventory reads every device, its MIG instances and the links between
// devices. Readings a device does not support are left at zero.
func (s *NVMLSource) Inventory(ctx context.Context) (Inventory, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Inventory{}, errors.New("gpu: nvml source is closed")
	}
	s.drainXID()
	inv := Inventory{Source: SourceNVML, Devices: make([]Device, 0, len(s.devices))}
	if v, ret := s.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.Driver = v
	}
	if v, ret := s.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		inv.CUDA = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	mps := mpsActive()
	for i, d := range s.devices {
		if err := ctx.Err(); err != nil {
			return Inventory{}, err
		}
		dev, err := s.readDevice(i, d)
		if err != nil {
			return Inventory{}, err
		}
		dev.MPS = mps
		dev.XIDErrors = slices.Clone(s.xids[i])
		judgeHealth(&dev)
		inv.Devices = append(inv.Devices, dev)
	}
	inv.Links = s.links(inv.Devices)
	return inv, nil
}

// readDevice reads one device's identity and readings.
func (s *NVMLSource) readDevice(i int, d nvml.Device) (Device, error) {
	dev := Device{Index: i, Vendor: VendorNVIDIA}
	var ret nvml.Return
	if dev.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("gpu: nvml device %d uuid: %w", i, ret)
	}
	if dev.Name, ret = d.GetName(); ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("gpu: nvml device %d name: %w", i, ret)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("gpu: nvml device %d memory: %w", i, ret)
	}
	dev.MemoryTotal, dev.MemoryUsed = int64(mem.Total), int64(mem.Used)
	if major, minor, ret := d.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		dev.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	}
	if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
		dev.PCIBusID = normalizeBusID(cString(pci.BusId[:]))
	}
	s.readLoad(d, &dev.Utilization, &dev.MemoryUsed, &dev.PowerW, &dev.TemperatureC)
	if n, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		dev.ECCErrors = n
	}
	if current, _, ret := d.GetMigMode(); ret == nvml.SUCCESS && current == nvml.DEVICE_MIG_ENABLE {
		dev.MIGEnabled = true
		mig, err := migInstances(d)
		if err != nil {
			return Device{}, fmt.Errorf("gpu: nvml device %d: %w", i, err)
		}
		dev.MIG = mig
	}
	return dev, nil
}

// readLoad fills the readings that change; unsupported ones stay as they are.
func (s *NVMLSource) readLoad(d nvml.Device, util *int, used *int64, power *float64, temp *int) {
	if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
		*util = int(u.Gpu)
	}
	if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
		*used = int64(m.Used)
	}
	if mw, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
		*power = math.Round(float64(mw)/10) / 100 // watts, two decimals as nvidia-smi prints
	}
	if t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		*temp = int(t)
	}
}

// migInstances lists the device's GPU instances with their compute
// instances, and matches them to MIG device handles for their UUIDs.
func migInstances(d nvml.Device) ([]MIGInstance, error) {
	uuids := map[[2]int]string{}
	memory := map[[2]int]int64{}
	if n, ret := d.GetMaxMigDeviceCount(); ret == nvml.SUCCESS {
		for k := range n {
			m, ret := d.GetMigDeviceHandleByIndex(k)
			if ret != nvml.SUCCESS {
				continue // an empty slot
			}
			gi, ret1 := m.GetGpuInstanceId()
			ci, ret2 := m.GetComputeInstanceId()
			uuid, ret3 := m.GetUUID()
			if ret1 != nvml.SUCCESS || ret2 != nvml.SUCCESS || ret3 != nvml.SUCCESS {
				continue
			}
			uuids[[2]int{gi, ci}] = uuid
			if mem, ret := m.GetMemoryInfo(); ret == nvml.SUCCESS {
				memory[[2]int{gi, ci}] = int64(mem.Total)
			}
		}
	}
	var out []MIGInstance
	for gp := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		gpInfo, ret := d.GetGpuInstanceProfileInfo(gp)
		if ret != nvml.SUCCESS {
			continue // profile not offered by this device
		}
		gis, ret := d.GetGpuInstances(&gpInfo)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("mig gpu instances of profile %d: %w", gp, ret)
		}
		for _, gi := range gis {
			giInfo, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, fmt.Errorf("mig gpu instance info: %w", ret)
			}
			for cp := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
				cpInfo, ret := gi.GetComputeInstanceProfileInfo(cp, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
				if ret != nvml.SUCCESS {
					continue
				}
				cis, ret := gi.GetComputeInstances(&cpInfo)
				if ret != nvml.SUCCESS {
					return nil, fmt.Errorf("mig compute instances: %w", ret)
				}
				for _, ci := range cis {
					ciInfo, ret := ci.GetInfo()
					if ret != nvml.SUCCESS {
						return nil, fmt.Errorf("mig compute instance info: %w", ret)
					}
					key := [2]int{int(giInfo.Id), int(ciInfo.Id)}
					mem := memory[key]
					if mem == 0 {
						mem = int64(gpInfo.MemorySizeMB) << 20
					}
					out = append(out, MIGInstance{
						Profile:           migProfileName(gp, gpInfo, cpInfo),
						UUID:              uuids[key],
						GPUInstanceID:     key[0],
						ComputeInstanceID: key[1],
						MemoryTotal:       mem,
					})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b MIGInstance) int {
		return cmp.Or(cmp.Compare(a.GPUInstanceID, b.GPUInstanceID), cmp.Compare(a.ComputeInstanceID, b.ComputeInstanceID))
	})
	return out, nil
}

// migProfileName names a MIG instance as nvidia-smi does: "3g.40gb", with
// "1c.3g.40gb" when the compute instance uses fewer slices than its GPU
// instance, and the media-engine suffixes of the revised profiles.
func migProfileName(profile int, gi nvml.GpuInstanceProfileInfo, ci nvml.ComputeInstanceProfileInfo) string {
	gb := (gi.MemorySizeMB + 1023) / 1024
	name := fmt.Sprintf("%dg.%dgb", gi.SliceCount, gb)
	switch profile {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		name += "+me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		name += "-me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		name += "+me.all"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
		nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		name += "+gfx"
	}
	if ci.SliceCount != 0 && ci.SliceCount < gi.SliceCount {
		name = strconv.Itoa(int(ci.SliceCount)) + "c." + name
	}
	return name
}

// links builds the device-to-device matrix: NVLink with its link count
// where the devices share links (directly or through NVSwitches), else the
// PCIe common ancestor.
func (s *NVMLSource) links(devs []Device) [][]Link {
	type nvlinks struct {
		switched int            // links to an NVSwitch
		peers    map[string]int // links straight to a GPU, by its bus id
	}
	per := make([]nvlinks, len(s.devices))
	for i, d := range s.devices {
		per[i].peers = map[string]int{}
		for l := range nvml.NVLINK_MAX_LINKS {
			state, ret := d.GetNvLinkState(l)
			if ret != nvml.SUCCESS {
				break // past the device's last link, or no NVLink at all
			}
			if state != nvml.FEATURE_ENABLED {
				continue
			}
			if kind, ret := d.GetNvLinkRemoteDeviceType(l); ret == nvml.SUCCESS && kind == nvml.NVLINK_DEVICE_TYPE_SWITCH {
				per[i].switched++
				continue
			}
			if pci, ret := d.GetNvLinkRemotePciInfo(l); ret == nvml.SUCCESS {
				per[i].peers[normalizeBusID(cString(pci.BusId[:]))]++
			}
		}
	}
	out := make([][]Link, len(s.devices))
	for i := range s.devices {
		out[i] = make([]Link, len(s.devices))
		for j := range s.devices {
			if i == j {
				out[i][j] = LinkSelf
				continue
			}
			count := per[i].peers[devs[j].PCIBusID]
			if per[i].switched > 0 && per[j].switched > 0 {
				count += min(per[i].switched, per[j].switched)
			}
			if count > 0 {
				out[i][j] = Link(fmt.Sprintf("NV%d", count))
				continue
			}
			level, ret := s.devices[i].GetTopologyCommonAncestor(s.devices[j])
			if ret != nvml.SUCCESS {
				out[i][j] = LinkSys
				continue
			}
			out[i][j] = topologyLink(level)
		}
	}
	return out
}

// topologyLink maps NVML's PCIe common-ancestor level to nvidia-smi's names.
func topologyLink(level nvml.GpuTopologyLevel) Link {
	switch level {
	case nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_SINGLE:
		return LinkPIX
	case nvml.TOPOLOGY_MULTIPLE:
		return LinkPXB
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return LinkPHB
	case nvml.TOPOLOGY_NODE:
		return LinkNode
	default:
		return LinkSys
	}
}

// Sample reads utilization, memory used, power and temperature of every
// device: four NVML calls per device, no allocation beyond the result.
func (s *NVMLSource) Sample(ctx context.Context) ([]DeviceSample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("gpu: nvml source is closed")
	}
	out := make([]DeviceSample, len(s.devices))
	for i, d := range s.devices {
		out[i].Index = i
		if uuid, ret := d.GetUUID(); ret == nvml.SUCCESS {
			out[i].UUID = uuid
		}
		s.readLoad(d, &out[i].Utilization, &out[i].MemoryUsed, &out[i].PowerW, &out[i].TemperatureC)
	}
	return out, ctx.Err()
}

// Close frees the event set and shuts the library down. Closing twice is
// harmless.
func (s *NVMLSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.events != nil {
		s.events.Free()
	}
	if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("gpu: nvml shutdown: %w", ret)
	}
	return nil
}

// cString converts a NUL-terminated C char array.
func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}
