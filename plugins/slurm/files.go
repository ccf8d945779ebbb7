package slurm

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The output directory is shared with the jobs, which run as the Slurm
// user and own their gang's directory: a job could replace its output
// file, or the directory, with a symbolic link to a file only the
// server's user may read (its state key), and the plugin, reading "the
// job's output" with the server's rights, would copy that file into the
// logs. openGangFile therefore follows no link in the two components the
// job controls, and opens regular files only.

// openGangFile opens name in the gang directory dir for reading.
func openGangFile(dir, name string) (*os.File, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	path := filepath.Join(dir, name)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file (%s): refused", path, st.Mode().Type())
	}
	return f, nil
}

// readGangFile reads a small file of the gang directory (its exit code,
// start time, job ids), at most 1 MiB.
func readGangFile(dir, name string) ([]byte, error) {
	f, err := openGangFile(dir, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}
