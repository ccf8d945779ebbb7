package api

import "time"

// This file holds the wire types of the agent API (/api/v1 on every
// `gpud agent`). The server sends JobSpecs and reads JobStatuses; both sides
// share these shapes so neither owns them.

// JobSpec is everything an agent needs to run one job on its host. The
// server fills it from a run's configuration after scheduling; the agent
// never reads YAML.
type JobSpec struct {
	// ID names the job on this host; it is unique per agent and stable
	// across agent restarts (the server's job id).
	ID string `json:"id"`
	// RunName is the run the job belongs to (DSTACK_RUN_NAME).
	RunName string `json:"run_name"`
	// Image is the container image; the process runtime ignores it.
	Image string `json:"image,omitempty"`
	// RegistryAuth logs in to the image's registry for the pull; never logged.
	RegistryAuth *JobRegistryAuth `json:"registry_auth,omitempty"`
	// Commands run in order by Shell joined with " && ", as dstack does.
	// Empty means the image's own entrypoint. With Entrypoint they are
	// its arguments instead, one each, run by no shell.
	Commands []string `json:"commands,omitempty"`
	// Entrypoint replaces the image's entrypoint (dstack's `entrypoint`,
	// split as a shell would); only the docker runtime honours it.
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Python is the Python version ("3.11") that `python` and `python3`
	// must be: a job with an image gets it through the image the server
	// chose; the process runtime puts the host's interpreter of that
	// version first on PATH, and fails the job when the host has none.
	Python string `json:"python,omitempty"`
	// Shell runs Commands; default "/bin/sh".
	Shell      string            `json:"shell,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	WorkingDir string            `json:"working_dir,omitempty"`
	// User is "uid", "uid:gid" or a user name known in the image.
	User       string `json:"user,omitempty"`
	Privileged bool   `json:"privileged,omitempty"`
	// ShmSize is /dev/shm's size in bytes; 0 keeps the runtime default.
	ShmSize Size `json:"shm_size,omitempty"`
	// CPUs limits CPU time (1.5 = one and a half cores); 0 means no limit.
	CPUs float64 `json:"cpus,omitempty"`
	// Memory is the hard memory limit in bytes; 0 means no limit. Going
	// over it kills the job with reason oom_killed.
	Memory Size    `json:"memory,omitempty"`
	GPUs   JobGPUs `json:"gpus,omitzero"`
	// Ports are published from the job to the host. With HostNetwork they
	// are only documentation: the job binds host ports itself.
	Ports []JobPort `json:"ports,omitempty"`
	// HostNetwork shares the host's network namespace; used when the job
	// owns the whole host (multi-node tasks).
	HostNetwork bool        `json:"host_network,omitempty"`
	Volumes     []JobVolume `json:"volumes,omitempty"`
	// StopDuration is how long a stop waits after SIGTERM before SIGKILL;
	// 0 means 10s.
	StopDuration time.Duration `json:"stop_duration,omitempty"`
	// Cluster describes the job's gang for the multi-node environment
	// variables; the zero value means a single node.
	Cluster JobCluster `json:"cluster,omitzero"`
	// Labels are copied onto the container (or process record) as is.
	Labels map[string]string `json:"labels,omitempty"`
	// Upload is the SHA-256 (hex) of the archive of the run's repos and
	// files, which the server PUTs to the agent (/api/v1/uploads/{sha256})
	// before the start; the agent unpacks it into the job's working
	// directory before the commands run.
	Upload string `json:"upload,omitempty"`
	// Repos are git repositories the agent clones on the host and adds to
	// the upload before the start (JobRepo).
	Repos []JobRepo `json:"repos,omitempty"`
}

// JobRegistryAuth holds credentials for one image registry.
type JobRegistryAuth struct {
	Server   string `json:"server,omitempty"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// JobGPUs says which accelerators a job may use and how much of them.
type JobGPUs struct {
	// Devices are device indices ("0") or UUIDs ("GPU-…", "MIG-…") visible
	// to the job; empty means none.
	Devices []string `json:"devices,omitempty"`
	// Share is the fraction of each device the job is given (0 < Share < 1
	// for fractional GPUs); 0 or 1 means whole devices.
	Share float64 `json:"share,omitempty"`
	// MemoryLimit caps device memory per device through MPS, in bytes.
	MemoryLimit Size `json:"memory_limit,omitempty"`
	// MPSPipeDir is the MPS control daemon's pipe directory, mounted into
	// the job when fractional sharing goes through MPS.
	MPSPipeDir string `json:"mps_pipe_dir,omitempty"`
}

// JobPort publishes a job port on the host.
type JobPort struct {
	// Container is the port the job listens on.
	Container int `json:"container"`
	// Host is the host port; 0 lets the runtime pick one (reported back in
	// JobStatus.Ports).
	Host int `json:"host,omitempty"`
	// Protocol is "tcp" (default) or "udp".
	Protocol string `json:"protocol,omitempty"`
	// HostIP binds the host side; default all addresses.
	HostIP string `json:"host_ip,omitempty"`
}

// JobVolume mounts a host path into the job (an instance volume). The
// agent mounts only host paths under its admin's VolumePrefixes, never its
// data dirs, and makes a missing directory (mode 0777, as dstack does).
type JobVolume struct {
	HostPath string `json:"host_path"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// Optional skips the volume (the job runs without it) where this host
	// cannot mount it, instead of failing the job.
	Optional bool `json:"optional,omitempty"`
	// Managed, when set, is a gpud-managed volume: the agent ignores
	// HostPath and mounts the directory it keeps for that volume under its
	// own data dir (made on first use), derived from the ids it validates.
	Managed *ManagedVolumeRef `json:"managed,omitempty"`
}

// JobCluster is the job's place in a multi-node gang; the agent turns it
// into DSTACK_* and GPUD_* environment variables.
type JobCluster struct {
	NodeRank     int      `json:"node_rank"`
	NodesNum     int      `json:"nodes_num"`
	MasterNodeIP string   `json:"master_node_ip,omitempty"`
	NodesIPs     []string `json:"nodes_ips,omitempty"`
	GPUsPerNode  int      `json:"gpus_per_node"`
}

// JobState is where a job is on the agent. The names are a subset of the
// server's job statuses so the server can copy them unchanged.
type JobState string

// Job states reported by the agent.
const (
	JobPulling     JobState = "pulling"
	JobRunning     JobState = "running"
	JobTerminating JobState = "terminating"
	JobDone        JobState = "done"       // exited with code 0
	JobFailed      JobState = "failed"     // non-zero exit, OOM, signal, start error, lost
	JobTerminated  JobState = "terminated" // stopped on request
)

// Finished reports whether s is a final state.
func (s JobState) Finished() bool {
	return s == JobDone || s == JobFailed || s == JobTerminated
}

// ExitReason says why a finished job ended.
type ExitReason string

// Exit reasons.
const (
	ExitExited      ExitReason = "exited"       // the main process exited by itself
	ExitOOMKilled   ExitReason = "oom_killed"   // over its memory limit
	ExitSignaled    ExitReason = "signaled"     // killed by a signal nobody on the agent sent
	ExitStopped     ExitReason = "stopped"      // stopped on request (SIGTERM, then SIGKILL)
	ExitStartFailed ExitReason = "start_failed" // never started: pull, create or exec failed
	ExitLost        ExitReason = "lost"         // gone while the agent was down, exit unknown
)

// JobStatus is the agent's view of one job.
type JobStatus struct {
	ID      string   `json:"id"`
	RunName string   `json:"run_name,omitempty"`
	Runtime string   `json:"runtime"` // "docker" or "process"
	State   JobState `json:"state"`
	// Handle is the container id or "pid:<n>".
	Handle     string     `json:"handle,omitempty"`
	ExitCode   int        `json:"exit_code"`
	Reason     ExitReason `json:"reason,omitempty"`
	Signal     string     `json:"signal,omitempty"` // e.g. "SIGKILL" when Reason is signaled or stopped
	Message    string     `json:"message,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  time.Time  `json:"started_at,omitzero"`
	FinishedAt time.Time  `json:"finished_at,omitzero"`
	// Ports are the published ports with the host ports actually bound.
	Ports []JobPort `json:"ports,omitempty"`
	// EndedWhileAgentDown is set for jobs that finished while the agent
	// was not running; their exit code was recovered at restart.
	EndedWhileAgentDown bool `json:"ended_while_agent_down,omitempty"`
	// Sessions are the job's interactive (SSH) sessions; nil if none ever.
	Sessions *JobSessions `json:"sessions,omitempty"`
}

// LogStream names a job output stream.
type LogStream string

// Log streams.
const (
	LogStdout LogStream = "stdout"
	LogStderr LogStream = "stderr"
)

// JobLogEntry is one line of job output. The logs endpoint streams entries as
// newline-delimited JSON in the order the job wrote them.
type JobLogEntry struct {
	Time   time.Time `json:"time"`
	Stream LogStream `json:"stream"`
	Line   string    `json:"line"` // without the trailing newline
	// Partial marks a piece of a line longer than MaxLogLine; the next
	// entry of the same stream continues it.
	Partial bool `json:"partial,omitempty"`
}

// JobMetrics is one sample of a job's resource use.
type JobMetrics struct {
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
	// CPUSeconds is the CPU time used since the job started.
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUPercent is the use since the previous sample, 100 = one core.
	CPUPercent  float64             `json:"cpu_percent"`
	MemoryBytes int64               `json:"memory_bytes"`
	MemoryLimit int64               `json:"memory_limit,omitempty"`
	GPUs        []AcceleratorSample `json:"gpus,omitempty"`
}

// AcceleratorSample is one reading of a device's load.
type AcceleratorSample struct {
	Index        int     `json:"index"`
	UUID         string  `json:"uuid,omitempty"`
	Utilization  int     `json:"utilization"` // percent
	MemoryUsed   int64   `json:"memory_used"` // bytes
	PowerW       float64 `json:"power_w"`
	TemperatureC int     `json:"temperature_c"`
}

// HostInfo describes an agent's host: what it has and what it can run.
type HostInfo struct {
	Hostname     string       `json:"hostname"`
	OS           string       `json:"os"` // e.g. "Debian GNU/Linux 12 (bookworm)"
	Kernel       string       `json:"kernel,omitempty"`
	Arch         string       `json:"arch"` // GOARCH: amd64, arm64
	CPUs         int          `json:"cpus"`
	Memory       Size         `json:"memory"`
	Disk         Size         `json:"disk"`      // total of the agent's data dir filesystem
	DiskFree     Size         `json:"disk_free"` // available there
	Addresses    []string     `json:"addresses,omitempty"`
	Docker       DockerInfo   `json:"docker"`
	Runtime      string       `json:"runtime"` // the runtime jobs run in
	AgentVersion string       `json:"agent_version,omitempty"`
	Accelerators Accelerators `json:"accelerators"`
	// Pythons are the Python versions ("3.11") of the python3.X
	// interpreters on the agent's PATH, which process-runtime jobs with
	// `python: "3.X"` use.
	Pythons []string `json:"pythons,omitempty"`
	// AllowPrivileged is the host admin's opt-in to privileged jobs
	// (`gpud agent --allow-privileged`, `gpud serve --allow-privileged` for
	// the server's own host): without it the agent refuses them, as a
	// privileged container is root on the host.
	AllowPrivileged bool `json:"allow_privileged,omitempty"`
	// VolumePrefixes are the host directories under which the host's admin
	// lets jobs mount instance volumes (`gpud agent --allow-volume-prefix`,
	// `gpud serve --allow-volume-prefix` for the server's own host; "/" in
	// the embedded laptop mode); none: no instance volume.
	VolumePrefixes []string `json:"volume_prefixes,omitempty"`
	// VolumeDenied are the host paths no instance volume may be, lie in or
	// contain, whatever the prefixes: the agent's and server's data dirs.
	VolumeDenied []string `json:"volume_denied,omitempty"`
}

// DockerInfo says whether the host's Docker engine is usable.
type DockerInfo struct {
	Usable     bool   `json:"usable"`
	Version    string `json:"version,omitempty"`
	APIVersion string `json:"api_version,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Accelerators is the host's accelerator inventory, as agent/gpu reports it.
type Accelerators struct {
	Source  string        `json:"source"` // nvml, nvidia-smi, sysfs, fake, none
	Driver  string        `json:"driver,omitempty"`
	CUDA    string        `json:"cuda,omitempty"`
	Devices []Accelerator `json:"devices"`
	// Links[i][j] is how device i reaches device j ("X", "NV18", "PIX",
	// "PXB", "PHB", "NODE", "SYS").
	Links [][]string `json:"links,omitempty"`
}

// Accelerator is one device with its latest readings.
type Accelerator struct {
	Index             int              `json:"index"`
	UUID              string           `json:"uuid,omitempty"`
	Name              string           `json:"name"`
	Vendor            string           `json:"vendor"`
	MemoryTotal       int64            `json:"memory_total"`
	MemoryUsed        int64            `json:"memory_used"`
	ComputeCapability string           `json:"compute_capability,omitempty"`
	PCIBusID          string           `json:"pci_bus_id,omitempty"`
	MIGEnabled        bool             `json:"mig_enabled,omitempty"`
	MIG               []AcceleratorMIG `json:"mig,omitempty"`
	MPS               bool             `json:"mps,omitempty"`
	Utilization       int              `json:"utilization"`
	TemperatureC      int              `json:"temperature_c"`
	PowerW            float64          `json:"power_w"`
	ECCErrors         uint64           `json:"ecc_errors"`
	XIDErrors         []uint64         `json:"xid_errors,omitempty"`
	Healthy           bool             `json:"healthy"`
	Problems          []string         `json:"problems,omitempty"`
}

// AcceleratorMIG is one MIG slice of a device.
type AcceleratorMIG struct {
	Profile           string `json:"profile"`
	UUID              string `json:"uuid,omitempty"`
	GPUInstanceID     int    `json:"gpu_instance_id"`
	ComputeInstanceID int    `json:"compute_instance_id"`
	MemoryTotal       int64  `json:"memory_total"`
}

// AgentError is the body of every agent API error response.
type AgentError struct {
	Error string `json:"error"`
}

// PortProtocol is the Upgrade token of the agent's port relay (GET
// /api/v1/jobs/{id}/ports/{port}): after 101 the stream carries the bytes
// of one TCP connection to the job's published port.
const PortProtocol = "gpud-port/1"
