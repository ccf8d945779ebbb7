// Package dockerimage builds the container image that the tests of the
// agent and the server run: a rootfs holding only the host's static busybox
// (from the busybox-static package) with a symlink per applet, imported
// into the engine with `docker import` semantics. No registry is needed.
//
// It is imported only by tests and benchmarks; it must not import daemon,
// store, sched, plugins or proxy.
package dockerimage

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/moby/moby/client"
)

// Ref is the image reference the tests use.
const Ref = "gpud-test/busybox:latest"

// Busybox is where the static busybox binary is expected.
const Busybox = "/bin/busybox"

// Build imports the busybox image into the engine under Ref, replacing an
// older one. Call it once per test binary (from TestMain). It fails with
// a message naming the fix when busybox-static is not installed.
func Build(ctx context.Context, cli *client.Client) error {
	rootfs, err := Rootfs()
	if err != nil {
		return err
	}
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"}, Ref,
		client.ImageImportOptions{Changes: []string{`CMD ["/bin/sh"]`, "ENV PATH=/bin"}})
	if err != nil {
		return fmt.Errorf("import %s: %w", Ref, err)
	}
	defer res.Close()
	if _, err := io.Copy(io.Discard, res); err != nil {
		return fmt.Errorf("import %s: %w", Ref, err)
	}
	return nil
}

// Rootfs returns a tar of /bin/busybox plus /bin/<applet> symlinks and
// the empty directories a container expects (/tmp, /etc, /proc, /sys, /dev).
func Rootfs() ([]byte, error) {
	bin, err := os.ReadFile(Busybox)
	if err != nil {
		return nil, fmt.Errorf("the test image needs a static busybox at %s (apt-get install busybox-static): %w", Busybox, err)
	}
	list, err := exec.Command(Busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", Busybox, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin", "tmp", "etc", "proc", "sys", "dev", "root", "work"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}); err != nil {
			return nil, err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
	}
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
