package process

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

const cgroupFS = "/sys/fs/cgroup"

// cgroup is the job's own control group, nested under the shim's (that is,
// the agent's) cgroup, so limits apply to the whole process tree and an
// OOM kill is counted. A nil *cgroup means the job has no limits.
type cgroup struct {
	dirs   []string // one per controller hierarchy (v1) or one (v2)
	parent []string
	v2     bool
}

// newCgroup creates the cgroup for l's limits and moves the calling
// process (the shim) into it, so the job it starts next inherits it.
func newCgroup(l launch) (*cgroup, error) {
	if l.Memory <= 0 && l.CPUs <= 0 {
		return nil, nil
	}
	name := "gpud-" + l.AgentID + "-" + l.JobID
	cg := &cgroup{}
	if _, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers")); err == nil {
		cg.v2 = true
		base, err := ownCgroup("")
		if err != nil {
			return nil, err
		}
		if err := cg.add(filepath.Join(cgroupFS, base), name); err != nil {
			return nil, err
		}
		dir := cg.dirs[0]
		if l.Memory > 0 {
			if err := writeFile(dir, "memory.max", strconv.FormatInt(l.Memory, 10)); err != nil {
				return nil, cg.fail(err)
			}
			writeFile(dir, "memory.swap.max", "0")
		}
		if l.CPUs > 0 {
			if err := writeFile(dir, "cpu.max", fmt.Sprintf("%d 100000", int64(l.CPUs*100000))); err != nil {
				return nil, cg.fail(err)
			}
		}
		return cg, cg.enter()
	}
	if l.Memory > 0 {
		base, err := ownCgroup("memory")
		if err != nil {
			return nil, err
		}
		if err := cg.add(filepath.Join(cgroupFS, "memory", base), name); err != nil {
			return nil, err
		}
		dir := cg.dirs[len(cg.dirs)-1]
		if err := writeFile(dir, "memory.limit_in_bytes", strconv.FormatInt(l.Memory, 10)); err != nil {
			return nil, cg.fail(err)
		}
		// Without swap accounting the file is missing; the limit still holds for RAM.
		writeFile(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(l.Memory, 10))
	}
	if l.CPUs > 0 {
		base, err := ownCgroup("cpu")
		if err != nil {
			return nil, cg.fail(err)
		}
		if err := cg.add(filepath.Join(cgroupFS, "cpu", base), name); err != nil {
			return nil, cg.fail(err)
		}
		dir := cg.dirs[len(cg.dirs)-1]
		writeFile(dir, "cpu.cfs_period_us", "100000")
		if err := writeFile(dir, "cpu.cfs_quota_us", strconv.FormatInt(int64(l.CPUs*100000), 10)); err != nil {
			return nil, cg.fail(err)
		}
	}
	return cg, cg.enter()
}

func (cg *cgroup) add(parent, name string) error {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return fmt.Errorf("create cgroup for the job's limits (the process runtime needs root and a writable cgroup): %w", err)
	}
	cg.dirs = append(cg.dirs, dir)
	cg.parent = append(cg.parent, parent)
	return nil
}

func (cg *cgroup) enter() error {
	pid := strconv.Itoa(os.Getpid())
	for _, d := range cg.dirs {
		if err := writeFile(d, "cgroup.procs", pid); err != nil {
			return cg.fail(err)
		}
	}
	return nil
}

// fail removes what was created and returns err.
func (cg *cgroup) fail(err error) error {
	cg.remove()
	return err
}

// oomKilled reports whether the kernel's OOM killer acted in the cgroup.
func (cg *cgroup) oomKilled() bool {
	if cg == nil {
		return false
	}
	file := "memory.oom_control"
	if cg.v2 {
		file = "memory.events"
	}
	for _, d := range cg.dirs {
		f, err := os.Open(filepath.Join(d, file))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), " ")
			if n, _ := strconv.Atoi(v); k == "oom_kill" && n > 0 {
				f.Close()
				return true
			}
		}
		f.Close()
	}
	return false
}

// remove moves the shim back to its parent cgroup and deletes the job's.
func (cg *cgroup) remove() {
	if cg == nil {
		return
	}
	pid := strconv.Itoa(os.Getpid())
	for i, d := range cg.dirs {
		writeFile(cg.parent[i], "cgroup.procs", pid)
		os.Remove(d)
	}
}

// ownCgroup returns the calling process's cgroup path for controller
// ("" for the v2 unified hierarchy).
func ownCgroup(controller string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read own cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" && parts[0] == "0" && parts[1] == "" {
			return parts[2], nil
		}
		for _, c := range strings.Split(parts[1], ",") {
			if controller != "" && c == controller {
				return parts[2], nil
			}
		}
	}
	return "", fmt.Errorf("no %q cgroup in /proc/self/cgroup", controller)
}

func writeFile(dir, name, value string) error {
	if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("cgroup %s: %w", name, err)
	}
	return nil
}
