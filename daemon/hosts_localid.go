package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// localAgentIDFile keeps the local agent's id in its data directory.
const localAgentIDFile = "agent-id"

// localAgentID returns the local agent's id, which labels its containers
// (dev.gpud.agent) and names its cgroups, so servers sharing one Docker
// engine adopt only their own jobs. The first start of a data dir makes it
// "local-" and 12 hex digits of the SHA-256 of the absolute data dir and
// keeps it in agentDir, so it stays the same across restarts (and if the
// data dir moves). An agent dir used before ids were kept (its agent.db
// exists, the file does not) keeps the former id "local", so its
// running jobs are still adopted.
func localAgentID(dataDir, agentDir string) (string, error) {
	path := filepath.Join(agentDir, localAgentIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if id == "" || sanitize(id) != id {
			return "", fmt.Errorf("local agent id in %s: %q is not a valid id", path, id)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("local agent id: %w", err)
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", fmt.Errorf("local agent id: %w", err)
	}
	sum := sha256.Sum256([]byte(abs))
	id := "local-" + hex.EncodeToString(sum[:6])
	if _, err := os.Stat(filepath.Join(agentDir, "agent.db")); err == nil {
		id = "local"
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("local agent id: %w", err)
	}
	return id, nil
}
