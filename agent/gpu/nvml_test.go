//go:build cgo

package gpu

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// newDGXH100 is go-nvml's dgxh100 mock server made to report the captured
// DGX H100 of testdata/gpu/dgxh100. The mock covers identity, memory, PCI
// and MIG; the readings, NVLink, PCIe topology, ECC and XID calls it leaves
// out are filled in here with what the real machine answers. xids are
// queued as critical XID events, as (device index, code) pairs.
func newDGXH100(t testing.TB, xids ...[2]int) *server.Server {
	t.Helper()
	srv := dgxh100.New()
	var mu sync.Mutex
	var queue []nvml.EventData
	for _, x := range xids {
		queue = append(queue, nvml.EventData{Device: srv.Devices[x[0]], EventType: nvml.EventTypeXidCriticalError, EventData: uint64(x[1])})
	}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
				mu.Lock()
				defer mu.Unlock()
				if len(queue) == 0 {
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
				ev := queue[0]
				queue = queue[1:]
				return ev, nvml.SUCCESS
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	for i, g := range dgxH100 {
		d := srv.Devices[i].(*server.Device)
		d.UUID, d.PciBusID = g.uuid, g.bus
		d.MemoryInfo = nvml.Memory{Total: 81559 << 20, Used: uint64(g.usedMiB) << 20, Free: uint64(81559-g.usedMiB) << 20}
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId}
			for k, c := range "0000" + g.bus { // NVML writes an 8-digit domain, upper case
				p.BusId[k] = int8(c)
			}
			return p, nvml.SUCCESS
		}
		mig := i == dgxMIGDevice
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			if mig {
				return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED // as on real MIG devices
			}
			return nvml.Utilization{Gpu: uint32(g.util), Memory: uint32(g.util / 2)}, nvml.SUCCESS
		}
		d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return uint32(g.tempC), nvml.SUCCESS }
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return g.powerMW, nvml.SUCCESS }
		d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
			return g.eccErrors, nvml.SUCCESS
		}
		d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			switch {
			case link >= 18:
				return 0, nvml.ERROR_INVALID_ARGUMENT // H100 has 18 links
			case mig:
				return nvml.FEATURE_DISABLED, nvml.SUCCESS // MIG mode turns NVLink off
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		d.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		}
		d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			j, _ := other.GetIndex()
			if dgxSocket(i) == dgxSocket(j) {
				return nvml.TOPOLOGY_NODE, nvml.SUCCESS
			}
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		}
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
			return nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
		}
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
		d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
		d.GetMigDeviceHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
		if mig {
			addMIG(t, d)
		}
	}
	return srv
}

// addMIG enables MIG on d and creates GPU 7's instances through the mock's
// own constructors, with MIG device handles for their UUIDs and memory.
func addMIG(t testing.TB, d *server.Device) {
	t.Helper()
	if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("enable MIG: %v", ret)
	}
	profiles := map[string][2]int{
		"3g.40gb": {nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE},
		"1g.10gb": {nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE},
	}
	var handles []nvml.Device
	for _, m := range dgxMIG {
		p := profiles[m.Profile]
		gi := dgxh100.NewGpuInstance(nvml.GpuInstanceInfo{Device: d, Id: uint32(m.GPUInstanceID), ProfileId: uint32(p[0])})
		ci := dgxh100.NewComputeInstance(nvml.ComputeInstanceInfo{Device: d, GpuInstance: gi, Id: uint32(m.ComputeInstanceID), ProfileId: uint32(p[1])})
		gi.ComputeInstances[ci] = struct{}{}
		d.GpuInstances[gi] = struct{}{}
		handles = append(handles, &mock.Device{
			GetUUIDFunc:              func() (string, nvml.Return) { return m.UUID, nvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return m.GPUInstanceID, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return m.ComputeInstanceID, nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				return nvml.Memory{Total: uint64(m.MemoryTotal)}, nvml.SUCCESS
			},
		})
	}
	d.GetMigDeviceHandleByIndexFunc = func(k int) (nvml.Device, nvml.Return) {
		if k < len(handles) {
			return handles[k], nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
}

func openDGXH100(t testing.TB, xids ...[2]int) *NVMLSource {
	t.Helper()
	src, err := NewNVML(context.Background(), newDGXH100(t, xids...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func TestNVMLReportsDGXH100Mock(t *testing.T) {
	inv, err := openDGXH100(t).Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	requireSameInventory(t, inv, wantDGXH100(SourceNVML))
}

func TestFallbackMatchesNVMLFieldByField(t *testing.T) {
	viaNVML, err := openDGXH100(t).Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	viaSMI, err := Discover(context.Background(), dgxFallbackOptions())
	if err != nil {
		t.Fatal(err)
	}
	if viaNVML.Source != SourceNVML || viaSMI.Source != SourceNvidiaSMI {
		t.Fatalf("sources %q and %q, want nvml and nvidia-smi", viaNVML.Source, viaSMI.Source)
	}
	viaSMI.Source = viaNVML.Source
	requireSameInventory(t, viaSMI, viaNVML)
}

func TestNVMLSampleMatchesFallbackSample(t *testing.T) {
	viaNVML, err := openDGXH100(t).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	viaSMI, err := Sample(context.Background(), dgxFallbackOptions())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(viaNVML, viaSMI) {
		t.Fatalf("samples differ:\nnvml       %+v\nnvidia-smi %+v", viaNVML, viaSMI)
	}
}

func TestNVMLCriticalXIDMakesDeviceUnhealthy(t *testing.T) {
	// XID 79 (fallen off the bus) twice and 48 (double-bit ECC) on GPU 6;
	// XID 13 (an application's own fault) on GPU 0 leaves it healthy.
	src := openDGXH100(t, [2]int{6, 79}, [2]int{0, 13}, [2]int{6, 48}, [2]int{6, 79})
	inv, err := src.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := inv.Devices[6]; d.Healthy || !slices.Equal(d.XIDErrors, []uint64{79, 48}) {
		t.Errorf("GPU 6: healthy=%v xids=%v problems=%v; want unhealthy with XIDs [79 48]", d.Healthy, d.XIDErrors, d.Problems)
	}
	if d := inv.Devices[0]; !d.Healthy || len(d.XIDErrors) != 0 {
		t.Errorf("GPU 0: healthy=%v xids=%v; an application XID must not mark it unhealthy", d.Healthy, d.XIDErrors)
	}
	again, err := src.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Devices[6].XIDErrors, []uint64{79, 48}) {
		t.Errorf("XIDs not remembered across reads: %v", again.Devices[6].XIDErrors)
	}
}

func TestNVMLUnavailableFallsBack(t *testing.T) {
	tests := []struct {
		name string
		lib  nvml.Interface
	}{
		{"library missing", nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1"))},
		{"driver not loaded", &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewNVML(context.Background(), tt.lib)
			if !errors.Is(err, ErrNoNVML) {
				t.Fatalf("NewNVML error %v, want ErrNoNVML", err)
			}
		})
	}
	// Open tries the system's NVML first and, where it does not load (as
	// on this CI machine), answers from the fallback instead.
	opts := dgxFallbackOptions()
	opts.DisableNVML = false
	src, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	sys := nvml.New()
	_, isNVML := src.(withSysfs)
	if loads := sys.Init() == nvml.SUCCESS; loads {
		sys.Shutdown()
		if !isNVML {
			t.Fatal("libnvidia-ml loads here but Open did not use it")
		}
		return
	}
	inv, err := src.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if isNVML || inv.Source != SourceNvidiaSMI || len(inv.Devices) != len(dgxH100) {
		t.Fatalf("without libnvidia-ml Open gave %T with source %q and %d devices; want the nvidia-smi fallback",
			src, inv.Source, len(inv.Devices))
	}
}

func TestNVMLClosedSourceRefusesReads(t *testing.T) {
	src, err := NewNVML(context.Background(), newDGXH100(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := src.Inventory(context.Background()); err == nil {
		t.Fatal("inventory after close succeeded")
	}
	if _, err := src.Sample(context.Background()); err == nil {
		t.Fatal("sample after close succeeded")
	}
}

func TestNVMLInventoryAddsOtherVendorsFromSysfs(t *testing.T) {
	src := withSysfs{Source: openDGXH100(t), sysfs: testdataDir("mixed", "sysfs")}
	inv, err := src.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var vendors []string
	for i, d := range inv.Devices {
		if d.Index != i {
			t.Errorf("device %d has index %d", i, d.Index)
		}
		vendors = append(vendors, d.Vendor)
	}
	want := []string{"nvidia", "nvidia", "nvidia", "nvidia", "nvidia", "nvidia", "nvidia", "nvidia", "tpu", "amd", "tenstorrent"}
	if !slices.Equal(vendors, want) {
		t.Fatalf("vendors %v, want NVML's 8 GPUs then sysfs's TPU, AMD, Tenstorrent (its NVIDIA one skipped)", vendors)
	}
	if inv.Source != SourceNVML || len(inv.Links) != 11 || inv.Links[0][1] != "NV18" || inv.Links[0][9] != LinkSys || inv.Links[9][9] != LinkSelf {
		t.Fatalf("source %q, links %v: want nvml with the NVLink matrix widened by SYS", inv.Source, inv.Links)
	}
}
