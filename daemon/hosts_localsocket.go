package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"

	agentserver "gpud.dev/gpud/agent/server"
)

// maxSocketPath is the longest unix socket path bound: sun_path holds 108
// bytes on Linux and 104 on macOS, with the terminating NUL.
const maxSocketPath = 103

// localSocket is where the local agent's unix socket is bound.
type localSocket struct {
	// path is the socket; dir is the private directory made for it when
	// the data dir's path was too long ("" when it lives in the data dir).
	path, dir string
}

// localSocketPath picks the local agent's socket: agentDir/agent.sock, or,
// when that path is too long for sun_path, agent.sock in a directory
// private to this user (0700) under $XDG_RUNTIME_DIR (else os.TempDir())
// named after a hash of the absolute data dir, so each data dir has its own.
func localSocketPath(dataDir, agentDir string) (localSocket, error) {
	if p := filepath.Join(agentDir, "agent.sock"); len(p) <= maxSocketPath {
		return localSocket{path: p}, nil
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return localSocket{}, fmt.Errorf("local agent socket: %w", err)
	}
	base := os.Getenv("XDG_RUNTIME_DIR")
	if !filepath.IsAbs(base) {
		base = os.TempDir()
	}
	sum := sha256.Sum256([]byte(abs))
	dir := filepath.Join(base, "gpud-"+hex.EncodeToString(sum[:8]))
	sock := localSocket{path: filepath.Join(dir, "agent.sock"), dir: dir}
	if len(sock.path) > maxSocketPath {
		return localSocket{}, fmt.Errorf("local agent socket: %s is longer than %d bytes and so is %s", filepath.Join(agentDir, "agent.sock"), maxSocketPath, sock.path)
	}
	if err := privateDir(dir); err != nil {
		return localSocket{}, fmt.Errorf("local agent socket: %w", err)
	}
	return sock, nil
}

// privateDir makes dir (mode 0700) or checks that an existing one is a real
// directory owned by this user, and tightens its mode to 0700, so another
// user of a shared temporary directory can neither own nor reach it.
func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("check %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%s is owned by uid %d, not this user", dir, st.Uid)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("make %s private: %w", dir, err)
	}
	return nil
}

// listen binds the socket (replacing a stale one) with mode 0600, as any
// agent's unix listener (agentserver.Listen).
func (l localSocket) listen() (net.Listener, error) {
	ln, err := agentserver.Listen("unix://" + l.path)
	if err != nil {
		return nil, fmt.Errorf("local agent socket: %w", err)
	}
	return ln, nil
}

// remove deletes the private directory made for the socket, if any, once
// the listener (which unlinks the socket) is closed.
func (l localSocket) remove() error {
	if l.dir == "" {
		return nil
	}
	if err := os.Remove(l.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("local agent socket: %w", err)
	}
	return nil
}
