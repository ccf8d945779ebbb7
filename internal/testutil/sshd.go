package testutil

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// The sshd test host is an image imported from a tarball that holds the
// machine's own Debian OpenSSH server (/usr/sbin/sshd and the shared
// libraries ldd names), busybox-static as the shell and coreutils, and a
// minimal /etc. No registry and no network are needed to build it. Host
// keys are not in the image: each container mounts its own key directory,
// so a test can change a host's key and restart it.

// sshdConfig is the server configuration inside the image.
const sshdConfig = `Port 22
HostKey /etc/ssh/keys/ssh_host_ed25519_key
AuthorizedKeysFile /etc/ssh/keys/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
PidFile /run/sshd.pid
LogLevel INFO
`

// SSHDImage returns the tag of the sshd test image, building and importing
// it when the engine does not have it yet. The tag is the hash of the
// tarball, so a changed sshd or busybox yields a new image.
func SSHDImage(t testing.TB) string {
	t.Helper()
	tarball, err := sshdRootfs()
	if err != nil {
		t.Fatalf("sshd image: %v", err)
	}
	sum := sha256.Sum256(tarball)
	tag := "gpud-test/sshd:" + hex.EncodeToString(sum[:6])
	if exec.Command("docker", "image", "inspect", tag).Run() == nil {
		return tag
	}
	cmd := exec.Command("docker", "import", "-", tag)
	cmd.Stdin = bytes.NewReader(tarball)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker import sshd image: %v: %s", err, out)
	}
	return tag
}

// sshdRootfs builds the image's tarball from the files installed here.
func sshdRootfs() ([]byte, error) {
	busybox, err := findBusybox()
	if err != nil {
		return nil, err
	}
	libs, err := sharedLibs("/usr/sbin/sshd")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dir := func(name string, mode int64) error {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: epoch}
		if name == "home/ops" {
			h.Uid, h.Gid = 1000, 1000 // the non-root login user owns its home
		}
		return tw.WriteHeader(h)
	}
	file := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: epoch}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	copyFile := func(from, to string) error {
		b, err := os.ReadFile(from) // follows symlinks: the image gets the real library
		if err != nil {
			return err
		}
		return file(to, 0o755, b)
	}
	for _, d := range []struct {
		name string
		mode int64
	}{{"bin", 0o755}, {"sbin", 0o755}, {"usr", 0o755}, {"usr/bin", 0o755}, {"usr/sbin", 0o755},
		{"lib", 0o755}, {"lib64", 0o755}, {"lib/x86_64-linux-gnu", 0o755}, {"lib/aarch64-linux-gnu", 0o755},
		{"etc", 0o755}, {"etc/ssh", 0o755}, {"etc/ssh/keys", 0o755}, {"root", 0o700}, {"home", 0o755},
		{"home/ops", 0o755}, {"run", 0o755}, {"run/sshd", 0o755}, {"tmp", 0o1777}, {"var", 0o755},
		{"var/lib", 0o755}, {"var/log", 0o755}, {"proc", 0o755}, {"sys", 0o755}, {"dev", 0o755}} {
		if err := dir(d.name, d.mode); err != nil {
			return nil, err
		}
	}
	if err := copyFile("/usr/sbin/sshd", "usr/sbin/sshd"); err != nil {
		return nil, err
	}
	for _, lib := range libs {
		if err := copyFile(lib, strings.TrimPrefix(lib, "/")); err != nil {
			return nil, err
		}
	}
	if err := copyFile(busybox, "bin/busybox"); err != nil {
		return nil, err
	}
	applets, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	for _, a := range strings.Fields(string(applets)) {
		if a == "busybox" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	etc := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nsshd:x:100:65534::/run/sshd:/bin/false\n" +
			"ops:x:1000:1000:ops:/home/ops:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":           "root:x:0:\nops:x:1000:\nnogroup:x:65534:\n",
		"etc/shadow":          "root:*:19000:0:99999:7:::\nsshd:*:19000:0:99999:7:::\nops:*:19000:0:99999:7:::\n",
		"etc/os-release":      "PRETTY_NAME=\"gpud sshd test host\"\nID=gpud-test\n",
		"etc/ssh/sshd_config": sshdConfig,
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range etc {
			if !yield(k) {
				return
			}
		}
	}) {
		mode := int64(0o644)
		if name == "etc/shadow" {
			mode = 0o600
		}
		if err := file(name, mode, []byte(etc[name])); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func findBusybox() (string, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if out, err := exec.Command("file", "-L", p).Output(); err == nil && bytes.Contains(out, []byte("statically linked")) {
			return p, nil
		} else if _, statErr := os.Stat(p); statErr == nil && err != nil {
			return p, nil // no file(1): trust the path, busybox-static installs here
		}
	}
	return "", fmt.Errorf("no static busybox: install busybox-static (CI's .ci/services.sh does)")
}

var lddLine = regexp.MustCompile(`(/\S+)\s+\(0x`)

// sharedLibs lists the absolute paths ldd prints for bin, loader included.
func sharedLibs(bin string) ([]string, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: install openssh-server (CI's .ci/services.sh does): %w", bin, err)
	}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	for _, m := range lddLine.FindAllStringSubmatch(string(out), -1) {
		libs = append(libs, m[1])
	}
	return libs, nil
}

// DockerNetwork is a user-defined bridge network a test created, with a
// subnet of its own so containers can be reconnected at their old address.
type DockerNetwork struct {
	Name   string
	Subnet string // e.g. 10.213.7.0/24
	prefix string // "10.213.7."
	next   int
}

// NewDockerNetwork creates a bridge network on a free 10.213.N.0/24 subnet
// and removes it when the test ends.
func NewDockerNetwork(t testing.TB) *DockerNetwork {
	t.Helper()
	name := "gpud-test-" + randomHex(4)
	var lastErr error
	for try := 0; try < 20; try++ {
		n := int(randomByte())
		prefix := fmt.Sprintf("10.213.%d.", n)
		subnet := prefix + "0/24"
		out, err := exec.Command("docker", "network", "create", "--driver", "bridge", "--subnet", subnet, name).CombinedOutput()
		if err != nil {
			lastErr = fmt.Errorf("%v: %s", err, out)
			continue
		}
		nw := &DockerNetwork{Name: name, Subnet: subnet, prefix: prefix, next: 10}
		t.Cleanup(func() { exec.Command("docker", "network", "rm", name).Run() })
		return nw
	}
	t.Fatalf("docker network create: %v", lastErr)
	return nil
}

// SSHD is one sshd container on a DockerNetwork.
type SSHD struct {
	Name    string // container name
	IP      string // address on the network
	Port    int    // 22
	HostKey ssh.PublicKey
	keyDir  string
	network *DockerNetwork
}

// Addr is "ip:22".
func (s *SSHD) Addr() string { return fmt.Sprintf("%s:%d", s.IP, s.Port) }

// StartSSHD runs an sshd container that accepts the given client keys for
// root and for the unprivileged user ops (uid 1000, home /home/ops), on a fixed address of nw; it is removed when the test ends.
func StartSSHD(t testing.TB, image string, nw *DockerNetwork, clientKeys ...ssh.PublicKey) *SSHD {
	t.Helper()
	keyDir := t.TempDir()
	var auth bytes.Buffer
	for _, k := range clientKeys {
		auth.Write(ssh.MarshalAuthorizedKey(k))
	}
	if err := os.WriteFile(filepath.Join(keyDir, "authorized_keys"), auth.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	nw.next++
	s := &SSHD{Name: nw.Name + "-h" + fmt.Sprint(nw.next), IP: nw.prefix + fmt.Sprint(nw.next), Port: 22, keyDir: keyDir, network: nw}
	s.writeHostKey(t)
	out, err := exec.Command("docker", "run", "-d", "--init", "--name", s.Name, "--hostname", s.Name,
		"--network", nw.Name, "--ip", s.IP, "-v", keyDir+":/etc/ssh/keys:ro",
		image, "/usr/sbin/sshd", "-D", "-e").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run sshd: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", s.Name).Run() })
	s.waitListening(t)
	return s
}

// writeHostKey puts a fresh ed25519 host key in the key directory.
func (s *SSHD) writeHostKey(t testing.TB) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.keyDir, "ssh_host_ed25519_key"), pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	if s.HostKey, err = ssh.NewPublicKey(pub); err != nil {
		t.Fatal(err)
	}
}

// waitListening waits until sshd answers with its banner.
func (s *SSHD) waitListening(t testing.TB) {
	t.Helper()
	Eventually(t, 20*time.Second, func() error {
		out, err := exec.Command("docker", "exec", s.Name, "/bin/sh", "-c", "cat /run/sshd.pid").CombinedOutput()
		if err != nil {
			logs, _ := exec.Command("docker", "logs", "--tail", "5", s.Name).CombinedOutput()
			return fmt.Errorf("sshd in %s not started: %v: %s %s", s.Name, err, out, logs)
		}
		return nil
	})
}

// ChangeHostKey gives the host a new host key and restarts its sshd, as a
// reinstalled (or impersonated) machine would look.
func (s *SSHD) ChangeHostKey(t testing.TB) {
	t.Helper()
	s.writeHostKey(t)
	if out, err := exec.Command("docker", "restart", "-t", "1", s.Name).CombinedOutput(); err != nil {
		t.Fatalf("docker restart: %v: %s", err, out)
	}
	s.waitListening(t)
}

// Kill kills the container (no clean shutdown, like a power loss).
func (s *SSHD) Kill(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("docker", "kill", s.Name).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v: %s", err, out)
	}
}

// Disconnect takes the container off its network (a partition).
func (s *SSHD) Disconnect(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("docker", "network", "disconnect", s.network.Name, s.Name).CombinedOutput(); err != nil {
		t.Fatalf("docker network disconnect: %v: %s", err, out)
	}
}

// Reconnect puts the container back on its network at its old address.
func (s *SSHD) Reconnect(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("docker", "network", "connect", "--ip", s.IP, s.network.Name, s.Name).CombinedOutput(); err != nil {
		t.Fatalf("docker network connect: %v: %s", err, out)
	}
}

// Exec runs a shell command in the container and returns its output.
func (s *SSHD) Exec(t testing.TB, script string) string {
	t.Helper()
	out, err := exec.Command("docker", "exec", s.Name, "/bin/sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("docker exec %s %q: %v: %s", s.Name, script, err, out)
	}
	return string(out)
}

// ClientKey is an ed25519 key pair for SSH clients in tests, with the
// private key written (OpenSSH format, mode 0600) to IdentityFile.
type ClientKey struct {
	IdentityFile string
	Public       ssh.PublicKey
	Signer       ssh.Signer
}

// NewClientKey generates a key and writes its identity file under dir.
func NewClientKey(t testing.TB, dir string) ClientKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "gpud test")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "id_ed25519_"+randomHex(3))
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return ClientKey{IdentityFile: path, Public: signer.PublicKey(), Signer: signer}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func randomByte() byte {
	var b [1]byte
	rand.Read(b[:])
	return b[0]
}
