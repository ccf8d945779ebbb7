package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/agent/gpu"
	"gpud.dev/gpud/agent/runtime"
)

// HostConfig is everything one host's agent is assembled from. `gpud
// agent` and the server's local agent both open theirs with OpenHost, so
// they choose runtimes, guard user code and serve the API the same way;
// each then adds only its transport (a TCP or unix listener, a
// registration tunnel, the server's private socket).
type HostConfig struct {
	// DataDir holds the agent's state (agent.db), job files, the token
	// and the host key; it is made (or tightened to) mode 0700 before
	// any job can run, so no other user, a process job included, enters it.
	DataDir string
	// AgentID tells this agent's containers and cgroups from other
	// agents' on the same host.
	AgentID string
	// Runtime is auto (default), docker, process or mixed (agent.Runtime*).
	Runtime string
	// Policy is whom the agent runs jobs for (agent.RunPolicy).
	Policy agent.RunPolicy
	// ProcessWorkRoot holds process jobs' working directories (default:
	// see process.Config.WorkRoot); ShimCommand starts their shim (default:
	// this executable with "agent shim").
	ProcessWorkRoot string
	ShimCommand     []string
	// FakeGPUs reports a fake inventory ("8xH100:80GB") instead of the
	// hardware's.
	FakeGPUs string
	// JobRetention is how long a finished job's container or files stay
	// on the host (agent.Config.JobRetention; zero: the default, an hour).
	JobRetention time.Duration
	// Token is the API's bearer token. "" keeps one in DataDir/token
	// (agent.LoadOrCreateToken); the server's local agent passes a fresh
	// one each start, which no file holds.
	Token   string
	Version string
	Logger  zerolog.Logger
}

// Host is one host's agent, open: its job manager, and the API that
// serves it with Token. Close it when done; jobs keep running.
type Host struct {
	Agent *agent.Agent
	// Handler is the agent API (New), for any transport.
	Handler http.Handler
	// Token is the bearer token Handler requires.
	Token string

	rt   runtime.Runtime
	gpus gpu.Source
}

// OpenHost makes the data dir private, opens the runtime under the
// policy (agent.OpenHostRuntime), the accelerators and the agent (which
// re-adopts its jobs), and builds the API. On error everything it opened
// is closed again.
func OpenHost(ctx context.Context, cfg HostConfig) (h *Host, err error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	// An existing dir may have been made wider: tighten it before a
	// runtime (a process job as another user) can look.
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	token := cfg.Token
	if token == "" {
		if token, err = agent.LoadOrCreateToken(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	rt, dinfo, err := agent.OpenHostRuntime(ctx, agent.RuntimeOptions{Kind: cfg.Runtime, DataDir: cfg.DataDir, AgentID: cfg.AgentID,
		ProcessWorkRoot: cfg.ProcessWorkRoot, ShimCommand: cfg.ShimCommand, Logger: cfg.Logger}, cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	h = &Host{Token: token, rt: rt}
	defer func() {
		if err != nil {
			err = errors.Join(err, h.Close())
			h = nil
		}
	}()
	if h.gpus, err = gpu.Open(ctx, gpu.Options{Fake: cfg.FakeGPUs}); err != nil {
		return h, fmt.Errorf("accelerators: %w", err)
	}
	// No instance volume may expose the agent's data dir, its jobs'
	// working directories or (on the server's host) the server's.
	denied := append([]string{cfg.DataDir, agent.WorkRootOf(rt)}, cfg.Policy.VolumeDenied...)
	volumes, err := agent.NewVolumePolicy(cfg.Policy.VolumePrefixesAllowed(), denied)
	if err != nil {
		return h, err
	}
	if h.Agent, err = agent.New(ctx, agent.Config{DataDir: cfg.DataDir, Runtime: rt, GPUs: h.gpus, Docker: dinfo,
		AllowPrivileged: cfg.Policy.PrivilegedAllowed(), Volumes: volumes, JobRetention: cfg.JobRetention,
		Version: cfg.Version, Logger: cfg.Logger}); err != nil {
		return h, err
	}
	if h.Handler, err = New(h.Agent, token, cfg.Logger); err != nil {
		return h, err
	}
	return h, nil
}

// Serve serves the API on l until ctx ends, then shuts down like Serve:
// open requests (log follows, waits) get a grace, then are cut.
func (h *Host) Serve(ctx context.Context, l net.Listener) error {
	return Serve(ctx, l, h.Handler)
}

// RuntimeName is the runtime jobs run in ("docker", "process",
// "docker+process", or "none" on a server host without Docker).
func (h *Host) RuntimeName() string { return h.rt.Name() }

// Close stops the agent's watchers and closes the state file, the runtime
// and the accelerators. Jobs keep running; the next agent re-adopts them.
// Stop serving first.
func (h *Host) Close() error {
	var err error
	if h.Agent != nil {
		err = h.Agent.Close()
	}
	err = errors.Join(err, h.rt.Close())
	if h.gpus != nil {
		err = errors.Join(err, h.gpus.Close())
	}
	return err
}
