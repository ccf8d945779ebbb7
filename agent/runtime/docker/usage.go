package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"gpud.dev/gpud/agent/runtime"
)

// Usage reads the container's cgroup files directly (microseconds), and
// falls back to the engine's stats endpoint, which on Docker 20.10 waits
// for its next collection cycle (up to a second), when they are not there.
func (r *Runtime) Usage(ctx context.Context, h runtime.Handle) (runtime.Usage, error) {
	if u, err := r.cgroupUsage(ctx, h); err == nil {
		return u, nil
	}
	return r.statsUsage(ctx, h)
}

// cgroupDirs are a container's memory and CPU accounting directories.
type cgroupDirs struct {
	memory, cpu string
	v2          bool
}

func (r *Runtime) cgroupUsage(ctx context.Context, h runtime.Handle) (runtime.Usage, error) {
	r.mu.Lock()
	dirs, ok := r.cgroups[h.ID]
	r.mu.Unlock()
	if !ok {
		ins, err := r.cli.ContainerInspect(ctx, h.ID, client.ContainerInspectOptions{})
		if err != nil {
			return runtime.Usage{}, err
		}
		if ins.Container.State == nil || ins.Container.State.Pid == 0 {
			return runtime.Usage{}, errors.New("container not running")
		}
		if dirs, err = containerCgroups(ins.Container.State.Pid); err != nil {
			return runtime.Usage{}, err
		}
		r.mu.Lock()
		r.cgroups[h.ID] = dirs
		r.mu.Unlock()
	}
	var u runtime.Usage
	stat := readKeyed(filepath.Join(dirs.memory, "memory.stat"))
	if dirs.v2 {
		u.MemoryBytes = readInt(filepath.Join(dirs.memory, "memory.current")) - stat["inactive_file"]
		u.MemoryLimit = readInt(filepath.Join(dirs.memory, "memory.max"))
		u.CPUSeconds = float64(readKeyed(filepath.Join(dirs.cpu, "cpu.stat"))["usage_usec"]) / 1e6
	} else {
		u.MemoryBytes = readInt(filepath.Join(dirs.memory, "memory.usage_in_bytes")) - stat["total_inactive_file"]
		u.MemoryLimit = readInt(filepath.Join(dirs.memory, "memory.limit_in_bytes"))
		u.CPUSeconds = float64(readInt(filepath.Join(dirs.cpu, "cpuacct.usage"))) / 1e9
	}
	if u.MemoryBytes <= 0 {
		r.mu.Lock()
		delete(r.cgroups, h.ID) // gone (the container ended): forget it
		r.mu.Unlock()
		return runtime.Usage{}, errors.New("cgroup gone")
	}
	if u.MemoryLimit <= 0 || u.MemoryLimit >= 1<<62 {
		u.MemoryLimit = 0
	}
	return u, nil
}

// containerCgroups finds the cgroup directories of the container's init
// process from /proc/PID/cgroup, for either cgroup version.
func containerCgroups(pid int) (cgroupDirs, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return cgroupDirs{}, err
	}
	var d cgroupDirs
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			switch c {
			case "memory":
				d.memory = filepath.Join("/sys/fs/cgroup/memory", parts[2])
			case "cpuacct":
				d.cpu = filepath.Join("/sys/fs/cgroup/cpuacct", parts[2])
			}
		}
		if parts[0] == "0" && parts[1] == "" && d.memory == "" {
			d.memory = filepath.Join("/sys/fs/cgroup", parts[2])
			d.cpu, d.v2 = d.memory, true
		}
	}
	if d.memory == "" || d.cpu == "" {
		return d, errors.New("no memory or cpu cgroup")
	}
	if _, err := os.Stat(d.memory); err != nil {
		return d, err // another mount namespace; use the stats endpoint
	}
	if d.v2 && !strings.Contains(string(b), "0::/") {
		return d, errors.New("mixed cgroup setup")
	}
	return d, nil
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

func readKeyed(path string) map[string]int64 {
	out := map[string]int64{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok {
			out[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return out
}

// statsUsage reads one sample from the engine's stats endpoint.
func (r *Runtime) statsUsage(ctx context.Context, h runtime.Handle) (runtime.Usage, error) {
	res, err := r.cli.ContainerStats(ctx, h.ID, client.ContainerStatsOptions{})
	if err != nil {
		return runtime.Usage{}, fmt.Errorf("job %s: stats: %w", h.JobID, err)
	}
	defer res.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		return runtime.Usage{}, fmt.Errorf("job %s: stats: %w", h.JobID, err)
	}
	mem := s.MemoryStats.Usage
	// Page cache is reclaimable; report the working set as docker stats does.
	if c, ok := s.MemoryStats.Stats["total_inactive_file"]; ok && c < mem {
		mem -= c
	} else if c, ok := s.MemoryStats.Stats["inactive_file"]; ok && c < mem {
		mem -= c
	}
	u := runtime.Usage{CPUSeconds: float64(s.CPUStats.CPUUsage.TotalUsage) / 1e9, MemoryBytes: int64(mem)}
	if s.MemoryStats.Limit > 0 && s.MemoryStats.Limit < 1<<62 {
		u.MemoryLimit = int64(s.MemoryStats.Limit)
	}
	return u, nil
}
