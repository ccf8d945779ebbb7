package sshfleet

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestChangedHostKeyIsRefusedWithBothFingerprints pins a real sshd's key
// on first use, gives the host a new key, and checks the next connection
// is refused with a message naming the host, both fingerprints and the
// way to accept the new key — for each HostKeyStore implementation.
func TestChangedHostKeyIsRefusedWithBothFingerprints(t *testing.T) {
	f := newFleet(t, 1)
	host := f.hosts[0]
	stores := []struct {
		name string
		keys HostKeyStore
	}{
		{"memory", &MemoryHostKeys{}},
		{"file", &FileHostKeys{Path: filepath.Join(t.TempDir(), "known_hosts")}},
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range stores {
		d := &Dialer{Keys: s.keys, AcceptKeyHint: "Run `gpud fleet forget-key` to accept it."}
		c, err := d.Dial(ctx, f.target(0))
		if err != nil {
			t.Fatalf("%s: first dial: %v", s.name, err)
		}
		c.Close()
		pinned, _ := s.keys.HostKey(ctx, f.target(0).Addr())
		if pinned == nil || ssh.FingerprintSHA256(pinned) != ssh.FingerprintSHA256(host.HostKey) {
			t.Fatalf("%s: pinned %v, want the host's key", s.name, pinned)
		}
	}
	old := ssh.FingerprintSHA256(host.HostKey)
	host.ChangeHostKey(t)
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			d := &Dialer{Keys: s.keys, AcceptKeyHint: "Run `gpud fleet forget-key` to accept it."}
			c, err := d.Dial(ctx, f.target(0))
			if err == nil {
				c.Close()
				t.Fatal("a host with a changed key was accepted")
			}
			var changed *HostKeyChangedError
			if !errors.Is(err, ErrHostKeyChanged) || !errors.As(err, &changed) {
				t.Fatalf("dial: %v; want a HostKeyChangedError", err)
			}
			msg := err.Error()
			for _, want := range []string{f.target(0).Addr(), old, ssh.FingerprintSHA256(host.HostKey), "gpud fleet forget-key"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not name %q", msg, want)
				}
			}
			// Forgetting the pin is how an operator accepts the new key.
			if err := s.keys.ForgetHostKey(ctx, f.target(0).Addr()); err != nil {
				t.Fatal(err)
			}
			c, err = d.Dial(ctx, f.target(0))
			if err != nil {
				t.Fatalf("dial after forgetting the pinned key: %v", err)
			}
			c.Close()
		})
	}
}
