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
	"gpud.dev/gpud/agent/runtime/process"
	"gpud.dev/gpud/api"
)

// Runtime kinds for OpenRuntime.
const (
	RuntimeAuto    = "auto"
	RuntimeDocker  = "docker"
	RuntimeProcess = "process"
)

// RuntimeOptions chooses and configures the job runtime.
type RuntimeOptions struct {
	Kind    string // auto (default), docker or process
	DataDir string
	AgentID string
	Logger  zerolog.Logger
}

// OpenRuntime opens the runtime of the given kind. Auto uses Docker when
// the engine answers within a few seconds and otherwise falls back to the
// process runtime, logging why. The DockerInfo says whether Docker is usable
// either way.
func OpenRuntime(ctx context.Context, o RuntimeOptions) (runtime.Runtime, api.DockerInfo, error) {
	kind := o.Kind
	if kind == "" {
		kind = RuntimeAuto
	}
	var info api.DockerInfo
	if kind == RuntimeDocker || kind == RuntimeAuto {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		d, err := docker.New(dctx, docker.Config{AgentID: o.AgentID, DataDir: filepath.Join(o.DataDir, "docker")})
		cancel()
		if err == nil {
			v, apiv := d.EngineVersion()
			return d, api.DockerInfo{Usable: true, Version: v, APIVersion: apiv}, nil
		}
		if kind == RuntimeDocker {
			return nil, info, err
		}
		info.Error = err.Error()
		o.Logger.Warn().Err(err).Msg("Docker is not reachable: falling back to the process runtime (commands run directly on the host, no image)")
	}
	if kind != RuntimeAuto && kind != RuntimeProcess {
		return nil, info, fmt.Errorf("runtime %q: use docker, process or auto", kind)
	}
	p, err := process.New(process.Config{DataDir: filepath.Join(o.DataDir, "jobs"), AgentID: o.AgentID})
	if err != nil {
		return nil, info, err
	}
	return p, info, nil
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
