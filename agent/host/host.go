// Package host reads what the agent's machine is: CPU count and
// architecture, memory, the data directory's disk, the OS and the network
// addresses. Accelerators come from agent/gpu and Docker from the runtime;
// the agent package joins them.
//
// host must not import daemon, store, sched, plugins, proxy, nor the agent
// package itself.
package host

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"gpud.dev/gpud/api"
)

// Info describes this machine; dataDir names the filesystem whose size is
// reported as the disk. Fields it cannot read stay empty.
func Info(dataDir string) (api.HostInfo, error) {
	h := api.HostInfo{Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), OS: osName()}
	h.Hostname, _ = os.Hostname()
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		h.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	mem, err := memTotal()
	if err != nil {
		return h, err
	}
	h.Memory = mem
	var st unix.Statfs_t
	if err := unix.Statfs(dataDir, &st); err != nil {
		return h, fmt.Errorf("host: disk of %s: %w", dataDir, err)
	}
	h.Disk = api.Size(int64(st.Blocks) * st.Bsize)
	h.DiskFree = api.Size(int64(st.Bavail) * st.Bsize)
	h.Addresses = addresses()
	return h, nil
}

// osName is PRETTY_NAME from /etc/os-release, or GOOS.
func osName() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS
}

func memTotal() (api.Size, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("host: memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("host: MemTotal %q: %w", v, err)
			}
			return api.Size(kb * 1024), nil
		}
	}
	return 0, fmt.Errorf("host: no MemTotal in /proc/meminfo")
}

// addresses lists the unicast addresses of interfaces that are up, minus
// loopback and link-local ones.
func addresses() []string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []string
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLinkLocalUnicast() || ipn.IP.IsLoopback() {
				continue
			}
			out = append(out, ipn.IP.String())
		}
	}
	return out
}
