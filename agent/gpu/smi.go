package gpu

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// smiInventoryFields and smiSampleFields are the nvidia-smi --query-gpu
// columns read, in order.
const (
	smiInventoryFields = "index,uuid,name,memory.total,memory.used,compute_cap,pci.bus_id,mig.mode.current," +
		"utilization.gpu,temperature.gpu,power.draw,ecc.errors.uncorrected.volatile.total,driver_version"
	smiSampleFields = "index,uuid,utilization.gpu,memory.used,power.draw,temperature.gpu"
)

// smi runs one nvidia-smi executable.
type smi struct{ path string }

// run executes nvidia-smi with args and returns its standard output.
func (s smi) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, s.path, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(string(out)) // nvidia-smi prints its failures on stdout
		}
		return nil, fmt.Errorf("%s %s: %w: %s", s.path, strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// inventory reads the devices, links, driver and CUDA versions and MIG
// instances, in four nvidia-smi calls (the last two only when needed).
func (s smi) inventory(ctx context.Context) (Inventory, error) {
	out, err := s.run(ctx, "--query-gpu="+smiInventoryFields, "--format=csv,noheader,nounits")
	if err != nil {
		return Inventory{}, err
	}
	inv := Inventory{Source: SourceNvidiaSMI}
	rows, err := readCSV(out, 13)
	if err != nil {
		return Inventory{}, fmt.Errorf("nvidia-smi --query-gpu: %w", err)
	}
	anyMIG := false
	for _, r := range rows {
		idx, err := strconv.Atoi(r[0])
		if err != nil {
			return Inventory{}, fmt.Errorf("nvidia-smi --query-gpu: index %q: %w", r[0], err)
		}
		d := Device{
			Index:             idx,
			UUID:              r[1],
			Name:              r[2],
			Vendor:            VendorNVIDIA,
			MemoryTotal:       smiMiB(r[3]),
			MemoryUsed:        smiMiB(r[4]),
			ComputeCapability: smiText(r[5]),
			PCIBusID:          normalizeBusID(r[6]),
			MIGEnabled:        r[7] == "Enabled",
			Utilization:       int(smiNumber(r[8])),
			TemperatureC:      int(smiNumber(r[9])),
			PowerW:            math.Round(smiNumber(r[10])*100) / 100,
			ECCErrors:         uint64(smiNumber(r[11])),
		}
		anyMIG = anyMIG || d.MIGEnabled
		inv.Driver = smiText(r[12])
		inv.Devices = append(inv.Devices, d)
	}
	q, err := s.run(ctx, "-q")
	if err != nil {
		return Inventory{}, err
	}
	cuda, migs := parseSMIQuery(q)
	inv.CUDA = cuda
	if anyMIG {
		list, err := s.run(ctx, "-L")
		if err != nil {
			return Inventory{}, err
		}
		attachMIG(inv.Devices, migs, parseSMIList(list))
	}
	if len(inv.Devices) > 1 {
		topo, err := s.run(ctx, "topo", "-m")
		if err != nil {
			return Inventory{}, err
		}
		if inv.Links, err = parseTopo(topo, len(inv.Devices)); err != nil {
			return Inventory{}, fmt.Errorf("nvidia-smi topo -m: %w", err)
		}
	} else if len(inv.Devices) == 1 {
		inv.Links = [][]Link{{LinkSelf}}
	}
	return inv, nil
}

// sample reads the changing readings in one nvidia-smi call.
func (s smi) sample(ctx context.Context) ([]DeviceSample, error) {
	out, err := s.run(ctx, "--query-gpu="+smiSampleFields, "--format=csv,noheader,nounits")
	if err != nil {
		return nil, err
	}
	rows, err := readCSV(out, 6)
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi --query-gpu: %w", err)
	}
	samples := make([]DeviceSample, 0, len(rows))
	for _, r := range rows {
		idx, err := strconv.Atoi(r[0])
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi --query-gpu: index %q: %w", r[0], err)
		}
		samples = append(samples, DeviceSample{
			Index: idx, UUID: r[1], Utilization: int(smiNumber(r[2])), MemoryUsed: smiMiB(r[3]),
			PowerW: math.Round(smiNumber(r[4])*100) / 100, TemperatureC: int(smiNumber(r[5])),
		})
	}
	return samples, nil
}

// readCSV parses nvidia-smi's csv,noheader output, each row with n fields.
func readCSV(out []byte, n int) ([][]string, error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = n
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("reading csv: %w", err)
	}
	for _, row := range rows {
		for i := range row {
			row[i] = strings.TrimSpace(row[i])
		}
	}
	return rows, nil
}

// smiText returns v, or "" for nvidia-smi's "[N/A]"-style placeholders.
func smiText(v string) string {
	if strings.HasPrefix(v, "[") || v == "N/A" {
		return ""
	}
	return v
}

// smiNumber parses a number, reading placeholders as 0.
func smiNumber(v string) float64 {
	f, err := strconv.ParseFloat(smiText(v), 64)
	if err != nil {
		return 0
	}
	return f
}

// smiMiB parses a size in MiB into bytes.
func smiMiB(v string) int64 { return int64(smiNumber(v)) << 20 }

// smiMIG is one "MIG Device" block of nvidia-smi -q.
type smiMIG struct {
	index, gi, ci int
	busID         string
	memory        int64
}

// parseSMIQuery reads the CUDA version and the MIG device blocks of
// nvidia-smi -q. Lines are "Key : Value" with indentation for nesting.
func parseSMIQuery(out []byte) (cuda string, migs []smiMIG) {
	var bus string
	var cur *smiMIG // the MIG Device block being read, if any
	curIndent := 0
	inFB := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		key, value, hasValue := strings.Cut(trimmed, ":")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if cur != nil && indent <= curIndent && trimmed != "" {
			cur = nil // back at the GPU's own sections
		}
		switch {
		case strings.HasPrefix(line, "GPU "):
			bus, cur = normalizeBusID(strings.TrimPrefix(line, "GPU ")), nil
		case hasValue && key == "CUDA Version":
			cuda = value
		case trimmed == "MIG Device":
			migs = append(migs, smiMIG{busID: bus})
			cur, curIndent, inFB = &migs[len(migs)-1], indent, false
		case cur == nil:
		case !hasValue:
			inFB = trimmed == "FB Memory Usage"
		case key == "Index":
			cur.index, _ = strconv.Atoi(value)
		case key == "GPU Instance ID":
			cur.gi, _ = strconv.Atoi(value)
		case key == "Compute Instance ID":
			cur.ci, _ = strconv.Atoi(value)
		case key == "Total" && inFB:
			cur.memory = smiMiB(strings.TrimSuffix(value, " MiB"))
			inFB = false
		}
	}
	return cuda, migs
}

// smiListMIG is one MIG line of nvidia-smi -L.
type smiListMIG struct {
	gpu, index    int
	profile, uuid string
}

var (
	smiListGPU     = regexp.MustCompile(`^GPU (\d+): `)
	smiListMIGLine = regexp.MustCompile(`^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)`)
)

// parseSMIList reads the MIG lines of nvidia-smi -L, each under its GPU.
func parseSMIList(out []byte) []smiListMIG {
	var list []smiListMIG
	gpu := -1
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := smiListGPU.FindStringSubmatch(sc.Text()); m != nil {
			gpu, _ = strconv.Atoi(m[1])
		} else if m := smiListMIGLine.FindStringSubmatch(sc.Text()); m != nil && gpu >= 0 {
			idx, _ := strconv.Atoi(m[2])
			list = append(list, smiListMIG{gpu: gpu, index: idx, profile: m[1], uuid: m[3]})
		}
	}
	return list
}

// attachMIG joins -q blocks (ids, memory) with -L lines (profile, UUID)
// by GPU and MIG device index, and hangs them on their devices.
func attachMIG(devs []Device, migs []smiMIG, list []smiListMIG) {
	for i := range devs {
		d := &devs[i]
		for _, m := range migs {
			if m.busID != d.PCIBusID {
				continue
			}
			inst := MIGInstance{GPUInstanceID: m.gi, ComputeInstanceID: m.ci, MemoryTotal: m.memory}
			for _, l := range list {
				if l.gpu == d.Index && l.index == m.index {
					inst.Profile, inst.UUID = l.profile, l.uuid
				}
			}
			d.MIG = append(d.MIG, inst)
		}
	}
}

// parseTopo reads the GPU-to-GPU part of nvidia-smi topo -m for n GPUs.
func parseTopo(out []byte, n int) ([][]Link, error) {
	links := make([][]Link, n)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		// Rows start at the margin with "GPU<i>"; the header starts with a tab.
		if len(fields) < n+1 || !strings.HasPrefix(line, "GPU") {
			continue
		}
		i, err := strconv.Atoi(strings.TrimPrefix(fields[0], "GPU"))
		if err != nil || i < 0 || i >= n {
			continue // the header line, or a GPU beyond the query
		}
		row := make([]Link, n)
		for j := range n {
			row[j] = Link(fields[j+1])
		}
		links[i] = row
	}
	for i, row := range links {
		if row == nil {
			return nil, errors.New("no row for GPU" + strconv.Itoa(i))
		}
	}
	return links, nil
}
