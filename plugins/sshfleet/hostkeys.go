package sshfleet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"

	"gpud.dev/gpud/internal/atomicfile"
)

// HostKeyStore pins SSH host keys. The server backs it with its state
// store; MemoryHostKeys and FileHostKeys serve tests and tools.
// Implementations must be safe for concurrent use.
type HostKeyStore interface {
	// HostKey returns the key pinned for addr ("host:port"), or nil, nil
	// when none is pinned yet.
	HostKey(ctx context.Context, addr string) (ssh.PublicKey, error)
	// PinHostKey records key as addr's key. It is called only when no key
	// was pinned, on the first successful key exchange.
	PinHostKey(ctx context.Context, addr string, key ssh.PublicKey) error
	// ForgetHostKey removes addr's pin, so the next connection pins the key
	// then offered: how an operator accepts a host's new key.
	ForgetHostKey(ctx context.Context, addr string) error
}

// ErrHostKeyChanged is matched (errors.Is) by every HostKeyChangedError.
var ErrHostKeyChanged = errors.New("host key changed")

// HostKeyChangedError says a host offered a key other than the pinned one:
// the machine was reinstalled, or someone is impersonating it. The
// connection was refused before any credential or command was sent.
type HostKeyChangedError struct {
	Addr    string
	Pinned  string // SHA256 fingerprint of the pinned key
	Offered string // SHA256 fingerprint of the key the host offered
	Accept  string // how an operator accepts the new key
}

func (e *HostKeyChangedError) Error() string {
	return fmt.Sprintf("host key of %s changed: pinned %s, offered %s; refusing to connect (the host may have been reinstalled, or someone may be impersonating it). %s",
		e.Addr, e.Pinned, e.Offered, e.Accept)
}

// Is makes errors.Is(err, ErrHostKeyChanged) true.
func (e *HostKeyChangedError) Is(target error) bool { return target == ErrHostKeyChanged }

const defaultAcceptHint = "If the change is expected, check the new fingerprint on the host (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), then forget the pinned key and apply the fleet again."

// pinningCallback checks the offered key against the store: pin it when
// none is pinned, accept it when equal, refuse it with HostKeyChangedError
// otherwise.
func pinningCallback(ctx context.Context, keys HostKeyStore, hint string) ssh.HostKeyCallback {
	if hint == "" {
		hint = defaultAcceptHint
	}
	return func(addr string, _ net.Addr, offered ssh.PublicKey) error {
		pinned, err := keys.HostKey(ctx, addr)
		if err != nil {
			return fmt.Errorf("host key of %s: %w", addr, err)
		}
		if pinned == nil {
			if err := keys.PinHostKey(ctx, addr, offered); err != nil {
				return fmt.Errorf("pin host key of %s: %w", addr, err)
			}
			return nil
		}
		if bytes.Equal(pinned.Marshal(), offered.Marshal()) {
			return nil
		}
		return &HostKeyChangedError{Addr: addr, Pinned: ssh.FingerprintSHA256(pinned),
			Offered: ssh.FingerprintSHA256(offered), Accept: hint}
	}
}

// MemoryHostKeys is a HostKeyStore in memory.
type MemoryHostKeys struct {
	mu   sync.Mutex
	keys map[string]ssh.PublicKey
}

// HostKey implements HostKeyStore.
func (m *MemoryHostKeys) HostKey(_ context.Context, addr string) (ssh.PublicKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.keys[addr], nil
}

// PinHostKey implements HostKeyStore.
func (m *MemoryHostKeys) PinHostKey(_ context.Context, addr string, key ssh.PublicKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keys == nil {
		m.keys = map[string]ssh.PublicKey{}
	}
	m.keys[addr] = key
	return nil
}

// ForgetHostKey implements HostKeyStore.
func (m *MemoryHostKeys) ForgetHostKey(_ context.Context, addr string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.keys, addr)
	return nil
}

// FileHostKeys is a HostKeyStore in a file of "host:port key-type base64"
// lines (written with mode 0600). Each call reads the file, so edits by
// hand (deleting a line to accept a new key) take effect at once.
type FileHostKeys struct {
	Path string
	mu   sync.Mutex
}

// HostKey implements HostKeyStore.
func (f *FileHostKeys) HostKey(_ context.Context, addr string) (ssh.PublicKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys, err := f.read()
	if err != nil {
		return nil, err
	}
	return keys[addr], nil
}

// PinHostKey implements HostKeyStore by appending one line.
func (f *FileHostKeys) PinHostKey(_ context.Context, addr string, key ssh.PublicKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fh, err := os.OpenFile(f.Path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("host keys: %w", err)
	}
	line := addr + " " + string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(key))) + "\n"
	if _, err := fh.WriteString(line); err != nil {
		fh.Close()
		return fmt.Errorf("host keys %s: %w", f.Path, err)
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		return fmt.Errorf("host keys %s: %w", f.Path, err)
	}
	return fh.Close()
}

// ForgetHostKey implements HostKeyStore by rewriting the file without
// addr's lines (to a temporary file renamed over it).
func (f *FileHostKeys) ForgetHostKey(_ context.Context, addr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("host keys: %w", err)
	}
	var kept bytes.Buffer
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if a, _, _ := strings.Cut(strings.TrimSpace(line), " "); a != addr {
			kept.WriteString(line)
		}
	}
	if err := atomicfile.WriteFile(f.Path, kept.Bytes(), 0o600); err != nil {
		return fmt.Errorf("host keys: %w", err)
	}
	return nil
}

func (f *FileHostKeys) read() (map[string]ssh.PublicKey, error) {
	keys := map[string]ssh.PublicKey{}
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return keys, nil
	}
	if err != nil {
		return nil, fmt.Errorf("host keys: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		addr, rest, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("host keys %s:%d: want \"host:port key-type base64\"", f.Path, n)
		}
		key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(rest))
		if err != nil {
			return nil, fmt.Errorf("host keys %s:%d: %w", f.Path, n, err)
		}
		keys[addr] = key
	}
	return keys, nil
}
