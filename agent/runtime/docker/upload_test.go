package docker

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeArchive writes a tar.gz of the given headers (with content for
// regular files) and returns its path.
func writeArchive(t *testing.T, entries []*tar.Header) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Name))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(h.Name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(t.TempDir(), "u.tar.gz")
	if err := os.WriteFile(name, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestRerootPlacesAbsoluteAndHomeTargetsAndDropsSpecialBits: entries under
// the reserved names land at their absolute path or under the home,
// the rest under the working directory; the anchors' own directories are
// not written (an upload never replaces / or the home's mode), and
// setuid bits and extended attributes never reach the engine.
func TestRerootPlacesAbsoluteAndHomeTargetsAndDropsSpecialBits(t *testing.T) {
	name := writeArchive(t, []*tar.Header{
		{Typeflag: tar.TypeDir, Name: ".gpud-root/", Mode: 0o700},
		{Typeflag: tar.TypeReg, Name: ".gpud-root/root/.ssh/id_rsa", Mode: 0o4755, PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "x"}},
		{Typeflag: tar.TypeDir, Name: ".gpud-home/", Mode: 0o777},
		{Typeflag: tar.TypeReg, Name: ".gpud-home/.config/app", Mode: 0o644},
		{Typeflag: tar.TypeReg, Name: "train.py", Mode: 0o644},
	})
	var out bytes.Buffer
	if err := reroot(name, rerootDirs{work: "workflow", home: "home/app"}, nil, &out); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, h.Name)
		if h.Mode&^0o777 != 0 || len(h.PAXRecords) != 0 {
			t.Errorf("%s: mode %o, PAX records %v reach the engine", h.Name, h.Mode, h.PAXRecords)
		}
	}
	if want := "root/.ssh/id_rsa home/app/.config/app workflow/train.py"; strings.Join(got, " ") != want {
		t.Errorf("entries %q, want %q", got, want)
	}
	// Without a known home an entry under ~ is an error, not a guess.
	if err := reroot(name, rerootDirs{work: "workflow"}, nil, io.Discard); err == nil {
		t.Error("an entry under ~ with no home: rerooted, want an error")
	}
	// An absolute target in a host mount (a volume, the hostfile) is
	// refused: the engine would write it on the host.
	for _, target := range []string{".gpud-root/data/cache/x", ".gpud-root/gpud/mpi_hostfile"} {
		mounted := writeArchive(t, []*tar.Header{{Typeflag: tar.TypeReg, Name: target, Mode: 0o644}})
		if err := reroot(mounted, rerootDirs{work: "w", mounts: []string{"data/cache", "gpud/mpi_hostfile"}}, nil, io.Discard); err == nil || !strings.Contains(err.Error(), "mounted") {
			t.Errorf("%s into a host mount: %v, want a refusal", target, err)
		}
	}
	// A file in place of the home directory itself is refused.
	bad := writeArchive(t, []*tar.Header{{Typeflag: tar.TypeReg, Name: ".gpud-home", Mode: 0o644}})
	if err := reroot(bad, rerootDirs{work: "w", home: "root"}, nil, io.Discard); err == nil {
		t.Error("a file replacing the home: rerooted, want an error")
	}
}

func TestPasswdHomeFindsTheUserByNameOrUID(t *testing.T) {
	const passwd = "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\nodd:x:1001:1001::relative:/bin/sh\n"
	for user, want := range map[string]string{"app": "/home/app", "1000": "/home/app", "odd": "", "nobody": ""} {
		got, err := passwdHome(strings.NewReader(passwd), user)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("passwdHome(%q) = %q, %v; want %q", user, got, err, want)
		}
	}
}
