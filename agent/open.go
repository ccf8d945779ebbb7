package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/agent/runtime"
	"gpud.dev/gpud/agent/runtime/docker"
	"gpud.dev/gpud/agent/runtime/mixed"
	"gpud.dev/gpud/agent/runtime/process"
	"gpud.dev/gpud/api"
)

// Runtime kinds for OpenRuntime.
const (
	RuntimeAuto    = "auto"
	RuntimeDocker  = "docker"
	RuntimeProcess = "process"
	// RuntimeMixed runs jobs with an image in Docker and image-less ones
	// as processes (agent/runtime/mixed); without Docker, processes alone.
	RuntimeMixed = "mixed"
)

// DefaultProcessUser is the user the process runtime runs jobs as when the
// agent is root and no other is named (`gpud agent --process-user`).
const DefaultProcessUser = "nobody"

// RuntimeOptions chooses and configures the job runtime.
type RuntimeOptions struct {
	Kind    string // auto (default), docker, process or mixed
	DataDir string
	AgentID string
	// ProcessUser is whom the process runtime runs jobs as (see
	// process.Config.RunAs; ProcessRunAs chooses it); "" runs them as the
	// agent's own user.
	ProcessUser string
	// ProcessWorkRoot holds the jobs' working directories (default: see
	// process.Config.WorkRoot).
	ProcessWorkRoot string
	// ShimCommand starts the process runtime's shim (default: this
	// executable with "agent shim").
	ShimCommand []string
	Logger      zerolog.Logger
}

// ProcessRunAs decides whom the process runtime runs jobs as when it runs
// them on behalf of a server (gpud serve's local fleet, or a registered or
// SSH host): user code never gets the agent's privileges. A root agent
// runs them as user (DefaultProcessUser when ""), which must not be root.
// An agent that is not root cannot switch users: it returns "" (jobs run
// as the agent's own user, in their own working directory) when
// ownUserAllowed, else an error that names the choices.
func ProcessRunAs(user string, ownUserAllowed bool) (string, error) {
	return processRunAs(user, ownUserAllowed, os.Geteuid())
}

func processRunAs(user string, ownUserAllowed bool, euid int) (string, error) {
	if user == "" {
		user = DefaultProcessUser
	}
	if euid != 0 {
		if ownUserAllowed {
			return "", nil
		}
		return "", fmt.Errorf("the process runtime runs jobs as user %q so that they cannot read this server's data; switching users needs root, and this server runs as uid %d. "+
			"Choose one: start the server as root; or run jobs in containers (Docker, --runtime docker); "+
			"or accept that jobs run as this server's user and can read its state key and data dir (--process-as-server-user)", user, euid)
	}
	c, err := process.LookupUID(user)
	if err != nil {
		return "", fmt.Errorf("--process-user %q: %w", user, err)
	}
	if c == 0 {
		return "", fmt.Errorf("--process-user %q is root: jobs must run as an unprivileged user", user)
	}
	return user, nil
}

// OpenRuntime opens the runtime of the given kind, with no policy of its
// own (OpenHostRuntime applies one). Auto uses Docker when the engine
// answers within a few seconds and otherwise falls back to the process
// runtime, logging why; mixed is Docker and the process runtime side by
// side (mixed.Runtime), or the process runtime alone, logged, without
// Docker. The DockerInfo says whether Docker is usable either way.
func OpenRuntime(ctx context.Context, o RuntimeOptions) (runtime.Runtime, api.DockerInfo, error) {
	kind := o.Kind
	if kind == "" {
		kind = RuntimeAuto
	}
	var info api.DockerInfo
	if kind == RuntimeDocker || kind == RuntimeAuto || kind == RuntimeMixed {
		d, dinfo, err := openDocker(ctx, o)
		info = dinfo
		switch {
		case err == nil && kind == RuntimeMixed:
			p, err := openProcess(o)
			if err != nil {
				return nil, info, errors.Join(fmt.Errorf("process runtime: %w", err), d.Close())
			}
			return mixed.New(d, p), info, nil
		case err == nil:
			return d, info, nil
		case kind == RuntimeDocker:
			return nil, info, err
		}
		o.Logger.Warn().Err(err).Str("process_user", o.ProcessUser).Msg("Docker is not reachable: falling back to the process runtime (commands run directly on the host, no image)")
	}
	if kind != RuntimeAuto && kind != RuntimeProcess && kind != RuntimeMixed {
		return nil, info, fmt.Errorf("runtime %q: use docker, process, mixed or auto", kind)
	}
	p, err := openProcess(o)
	if err != nil {
		return nil, info, err
	}
	return p, info, nil
}

// openDocker connects to the engine within a few seconds. Its DockerInfo
// carries the engine's version, or the error when it did not answer.
func openDocker(ctx context.Context, o RuntimeOptions) (*docker.Runtime, api.DockerInfo, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := docker.New(dctx, docker.Config{AgentID: o.AgentID, DataDir: filepath.Join(o.DataDir, "docker"), UploadDir: UploadDir(o.DataDir)})
	if err != nil {
		return nil, api.DockerInfo{Error: err.Error()}, err
	}
	v, apiv := d.EngineVersion()
	return d, api.DockerInfo{Usable: true, Version: v, APIVersion: apiv}, nil
}

// openProcess opens the process runtime, its jobs' files under DataDir/jobs.
func openProcess(o RuntimeOptions) (*process.Runtime, error) {
	return process.New(process.Config{DataDir: filepath.Join(o.DataDir, "jobs"), AgentID: o.AgentID,
		ShimCommand: o.ShimCommand, RunAs: o.ProcessUser, WorkRoot: o.ProcessWorkRoot, UploadDir: UploadDir(o.DataDir)})
}

// LoadOrCreateToken returns the agent's API token from dataDir/token,
// creating a random one (mode 0600) on first use.
func LoadOrCreateToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "token")
	b, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("agent token: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("agent token: %w", err)
	}
	tok := hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("agent token: %w", err)
	}
	return tok, nil
}
