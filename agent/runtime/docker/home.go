package docker

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/moby/moby/client"

	"gpud.dev/gpud/internal/upload"
)

// anchorsHome reports whether the upload archive at name has an entry
// under the job user's home (a `~/...` target), which the copy must then
// resolve.
func anchorsHome(name string) (bool, error) {
	f, err := os.Open(name)
	if err != nil {
		return false, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return false, err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if a, _ := upload.Anchored(path.Clean(strings.TrimSuffix(h.Name, "/"))); a == upload.AtHome {
			return true, nil
		}
	}
}

// maxPasswd bounds the /etc/passwd read from an image.
const maxPasswd = 1 << 20

// containerHome is the home directory of the created container's user,
// as dstack places `~`: /root for root (or no user), else the user's
// entry in the image's /etc/passwd, looked up by name or uid.
func (r *Runtime) containerHome(ctx context.Context, containerID string) (string, error) {
	ins, err := r.cli.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
	if err != nil {
		return "", fmt.Errorf("inspect container: %w", err)
	}
	user := ""
	if c := ins.Container.Config; c != nil {
		user, _, _ = strings.Cut(c.User, ":")
	}
	if user == "" || user == "root" || user == "0" {
		return "/root", nil
	}
	res, err := r.cli.CopyFromContainer(ctx, containerID, client.CopyFromContainerOptions{SourcePath: "/etc/passwd"})
	if err != nil {
		return "", fmt.Errorf("user %q: read the image's /etc/passwd: %w", user, err)
	}
	defer res.Content.Close()
	tr := tar.NewReader(res.Content)
	for {
		h, err := tr.Next()
		if err != nil {
			return "", fmt.Errorf("user %q: read the image's /etc/passwd: %w", user, err)
		}
		if h.Typeflag == tar.TypeReg {
			break
		}
	}
	home, err := passwdHome(io.LimitReader(tr, maxPasswd), user)
	if err != nil {
		return "", err
	}
	return home, nil
}

// passwdHome finds user (a name or a uid) in a passwd file and returns
// its home, which must be an absolute path other than /.
func passwdHome(r io.Reader, user string) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 7 || (f[0] != user && f[2] != user) {
			continue
		}
		home := path.Clean(f[5])
		if !path.IsAbs(home) || home == "/" {
			return "", fmt.Errorf("user %q: its home %q in the image's /etc/passwd is not a directory ~ can name; give an absolute path", user, f[5])
		}
		return home, nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("user %q: read the image's /etc/passwd: %w", user, err)
	}
	return "", fmt.Errorf("user %q has no entry in the image's /etc/passwd, so ~ names no directory; give an absolute path", user)
}
