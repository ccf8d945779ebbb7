package testutil

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestSSHDAcceptsOnlyTheClientKeyAndPresentsItsHostKey proves the fixture is a
// real sshd: the authorized key logs in and runs busybox's shell, another key
// is refused, and the host key offered is the one the fixture wrote.
func TestSSHDAcceptsOnlyTheClientKeyAndPresentsItsHostKey(t *testing.T) {
	image := SSHDImage(t)
	nw := NewDockerNetwork(t)
	good := NewClientKey(t, t.TempDir())
	bad := NewClientKey(t, t.TempDir())
	host := StartSSHD(t, image, nw, good.Public)

	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(good.Signer)},
		HostKeyCallback: ssh.FixedHostKey(host.HostKey)}
	var client *ssh.Client
	Eventually(t, 10*time.Second, func() (err error) { client, err = ssh.Dial("tcp", host.Addr(), cfg); return err })
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.CombinedOutput("uname -m && id -u")
	if err != nil {
		t.Fatalf("run: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "x86_64\n0") && !strings.Contains(string(out), "aarch64\n0") {
		t.Fatalf("uname -m && id -u = %q", out)
	}

	cfg.Auth = []ssh.AuthMethod{ssh.PublicKeys(bad.Signer)}
	if c, err := ssh.Dial("tcp", host.Addr(), cfg); err == nil {
		c.Close()
		t.Fatal("an unauthorized key logged in")
	}
}
