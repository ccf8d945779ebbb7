package runtime

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gpud.dev/gpud/api"
)

// Environment returns the job's environment as sorted "KEY=value" pairs:
// the spec's Env, the multi-node variables of DESIGN.md §5 (each under its
// DSTACK_ and its GPUD_ name) and the GPU selection variables. hostfile is
// the path the job sees DSTACK_MPI_HOSTFILE at ("" to leave it out).
// Variables the spec sets explicitly win over computed ones.
func Environment(spec api.JobSpec, hostfile string) []string {
	env := map[string]string{}
	c := clusterDefaults(spec)
	set := func(name, value string) {
		env["DSTACK_"+name] = value
		env["GPUD_"+name] = value
	}
	set("RUN_NAME", spec.RunName)
	set("NODE_RANK", strconv.Itoa(c.NodeRank))
	set("NODES_NUM", strconv.Itoa(c.NodesNum))
	set("MASTER_NODE_IP", c.MasterNodeIP)
	set("NODES_IPS", strings.Join(c.NodesIPs, "\n"))
	set("GPUS_PER_NODE", strconv.Itoa(c.GPUsPerNode))
	set("GPUS_NUM", strconv.Itoa(c.GPUsPerNode*c.NodesNum))
	if hostfile != "" {
		set("MPI_HOSTFILE", hostfile)
	}
	maps.Copy(env, GPUEnvironment(spec.GPUs))
	maps.Copy(env, spec.Env)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// GPUEnvironment returns the variables that select and share the job's
// accelerators: NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES for the
// devices ("void" when the job has none, so the NVIDIA container runtime
// hides every device), and the MPS variables for fractional shares.
func GPUEnvironment(g api.JobGPUs) map[string]string {
	env := map[string]string{}
	if len(g.Devices) == 0 {
		env["NVIDIA_VISIBLE_DEVICES"] = "void"
		return env
	}
	devices := strings.Join(g.Devices, ",")
	env["NVIDIA_VISIBLE_DEVICES"] = devices
	env["CUDA_VISIBLE_DEVICES"] = devices
	if g.Share > 0 && g.Share < 1 {
		pct := max(1, int(g.Share*100+0.5))
		env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.Itoa(pct)
	}
	if g.MemoryLimit > 0 {
		limits := make([]string, len(g.Devices))
		for i := range g.Devices {
			// MPS numbers the visible devices from 0.
			limits[i] = fmt.Sprintf("%d=%dM", i, int64(g.MemoryLimit/api.MB))
		}
		env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = strings.Join(limits, ",")
	}
	if g.MPSPipeDir != "" {
		env["CUDA_MPS_PIPE_DIRECTORY"] = g.MPSPipeDir
	}
	return env
}

// Hostfile returns the MPI hostfile of the job's gang: one "ip slots=N"
// line per node, master first.
func Hostfile(spec api.JobSpec) string {
	c := clusterDefaults(spec)
	var b strings.Builder
	for _, ip := range c.NodesIPs {
		fmt.Fprintf(&b, "%s slots=%d\n", ip, max(1, c.GPUsPerNode))
	}
	return b.String()
}

// clusterDefaults fills a single-node gang where the spec leaves the
// cluster empty: one node of rank 0 on loopback, with the job's devices.
func clusterDefaults(spec api.JobSpec) api.JobCluster {
	c := spec.Cluster
	if c.NodesNum <= 0 {
		c.NodesNum = 1
	}
	if c.GPUsPerNode <= 0 {
		c.GPUsPerNode = len(spec.GPUs.Devices)
	}
	if len(c.NodesIPs) == 0 {
		ip := c.MasterNodeIP
		if ip == "" {
			ip = "127.0.0.1"
		}
		c.NodesIPs = []string{ip}
	}
	if c.MasterNodeIP == "" {
		c.MasterNodeIP = c.NodesIPs[0]
	}
	return c
}

// ShellCommand returns the argv that runs the spec's commands: the shell
// with -c and the commands joined by " && ", or nil when there are none.
func ShellCommand(spec api.JobSpec) []string {
	if len(spec.Commands) == 0 {
		return nil
	}
	shell := spec.Shell
	if shell == "" {
		shell = "/bin/sh"
	}
	return []string{shell, "-c", strings.Join(spec.Commands, " && ")}
}
