// Package docker is the agent's container runtime: it runs each job as one
// Docker container through the Docker Engine API client, labels it so a
// restarted agent finds it again, and reads exits through the engine's wait
// endpoint (no polling).
//
// docker must not import daemon, store, sched, plugins, proxy, nor the
// agent package itself; it implements runtime.Runtime.
package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"gpud.dev/gpud/agent/runtime"
)

// Labels the runtime puts on every container it creates.
const (
	LabelManaged = "dev.gpud.managed" // "true"
	LabelAgent   = "dev.gpud.agent"   // Config.AgentID
	LabelJob     = "dev.gpud.job"     // JobSpec.ID
	LabelRun     = "dev.gpud.run"     // JobSpec.RunName
)

// GPU selection modes (Config.GPUMode).
const (
	GPUModeAuto           = ""                // device requests when the engine has the nvidia runtime, else env
	GPUModeDeviceRequests = "device-requests" // HostConfig.DeviceRequests with driver nvidia
	GPUModeEnv            = "env"             // NVIDIA_VISIBLE_DEVICES only
)

// Config configures the Docker runtime.
type Config struct {
	// AgentID tells this agent's containers from other agents' on the
	// same engine; default "default".
	AgentID string
	// DataDir holds per-job files the containers mount (the MPI hostfile).
	DataDir string
	// UploadDir holds the upload archives (<sha256>.tar.gz) the agent
	// keeps; a job naming one (JobSpec.Upload) gets it copied into its
	// working directory before it starts.
	UploadDir string
	// Host is the engine address; empty means DOCKER_HOST or the default socket.
	Host string
	// GPUMode chooses how GPUs are handed to containers.
	GPUMode string
	// ClientOptions are appended to the engine client's defaults (TLS,
	// tracing, request hooks for latency accounting).
	ClientOptions []client.Opt
}

// Runtime runs jobs as Docker containers. It is safe for concurrent use.
type Runtime struct {
	cfg     Config
	cli     *client.Client
	version string
	nvidia  bool

	mu      sync.Mutex
	cgroups map[string]cgroupDirs // container id -> its accounting dirs, for Usage
}

var _ runtime.Runtime = (*Runtime)(nil)

// New connects to the engine, negotiating the API version (the oldest
// engine supported speaks API 1.41), and fails if the engine does not
// answer within ctx.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.AgentID == "" {
		cfg.AgentID = "default"
	}
	if cfg.DataDir == "" {
		return nil, errors.New("docker runtime: DataDir is required")
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	opts = append(opts, cfg.ClientOptions...)
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker runtime: client: %w", err)
	}
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker runtime: engine at %s not reachable: %w", cli.DaemonHost(), err)
	}
	_, nvidia := info.Info.Runtimes["nvidia"]
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker runtime: %w", err)
	}
	return &Runtime{cfg: cfg, cli: cli, version: info.Info.ServerVersion, nvidia: nvidia, cgroups: map[string]cgroupDirs{}}, nil
}

// Name returns "docker".
func (r *Runtime) Name() string { return "docker" }

// EngineVersion is the engine's version and the negotiated API version.
func (r *Runtime) EngineVersion() (server, api string) { return r.version, r.cli.ClientVersion() }

// Client returns the engine client (for benchmarks and host info); the
// runtime keeps owning it.
func (r *Runtime) Client() *client.Client { return r.cli }

// Close closes the engine connection; containers keep running.
func (r *Runtime) Close() error { return r.cli.Close() }

func (r *Runtime) jobDir(jobID string) string { return filepath.Join(r.cfg.DataDir, jobID) }

// signalName names the signal behind a shell-style exit code (128+n), as
// the engine reports only the code.
func signalName(code int) string {
	if code <= 128 || code > 128+64 {
		return ""
	}
	if n := unix.SignalName(syscall.Signal(code - 128)); n != "" {
		return n
	}
	return "SIG" + strconv.Itoa(code-128)
}

func parseDockerTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 2000 {
		return time.Time{}
	}
	return t
}
