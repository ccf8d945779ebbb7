package process

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const cgroupFS = "/sys/fs/cgroup"

// cgroup is the job's own control group, nested under the shim's (that is,
// the agent's) cgroup, so limits apply to the whole process tree and an
// OOM kill is counted. The shim itself stays outside: the OOM killer must
// never choose it, nor may its memory count against the job's limit. A
// nil *cgroup means the job has no limits.
type cgroup struct {
	dirs   []string // one per controller hierarchy (v1) or one (v2)
	parent []string
	v2     bool
}

// newCgroup creates the cgroup for l's limits; start puts the job's
// command in it.
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
		return cg, nil
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
	return cg, nil
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

// start starts cmd inside the cgroup: on cgroup v2 it is cloned into it
// (CLONE_INTO_CGROUP); on v1 it waits at a gate until the shim moved it
// in. Either way nothing the job runs has a moment outside its limits.
func (cg *cgroup) start(cmd *exec.Cmd) error {
	if cg == nil {
		return cmd.Start()
	}
	if cg.v2 {
		dir, err := os.Open(cg.dirs[0])
		if err != nil {
			return fmt.Errorf("the job's cgroup: %w", err)
		}
		defer dir.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(dir.Fd())
		return cmd.Start()
	}
	procs := make([]string, len(cg.dirs))
	for i, d := range cg.dirs {
		procs[i] = filepath.Join(d, "cgroup.procs")
	}
	gate, err := newCgroupGate(procs)
	if err != nil {
		return err
	}
	defer gate.close()
	gate.wrap(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := gate.open(cmd.Process.Pid); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return err
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

// remove deletes the job's cgroup (the kernel refuses while a process the
// job left behind still runs in it).
func (cg *cgroup) remove() {
	if cg == nil {
		return
	}
	for _, d := range cg.dirs {
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

// cgroupGate holds a started command until it joined the job's v1
// cgroups. A nil gate lets it run at once.
type cgroupGate struct {
	procs []string
	r, w  *os.File
}

func newCgroupGate(procs []string) (*cgroupGate, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &cgroupGate{procs: procs, r: r, w: w}, nil
}

// wrap makes cmd wait at the gate: a shell reads a line from the gate's
// descriptor, then execs the command in its place (same pid, same
// arguments). A command cmd could not resolve still fails its Start.
func (g *cgroupGate) wrap(cmd *exec.Cmd) {
	if g == nil {
		return
	}
	fd := 3 + len(cmd.ExtraFiles)
	script := fmt.Sprintf(`read _ <&%d || exit 126; exec %d<&-; exec "$0" "$@"`, fd, fd)
	cmd.Args = append([]string{"/bin/sh", "-c", script, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
	cmd.ExtraFiles = append(cmd.ExtraFiles, g.r)
}

// open moves child into the cgroups, then lets it run.
func (g *cgroupGate) open(child int) error {
	if g == nil {
		return nil
	}
	g.r.Close() // the child holds its own copy
	for _, procs := range g.procs {
		if err := os.WriteFile(procs, []byte(strconv.Itoa(child)), 0); err != nil {
			return fmt.Errorf("join the job's cgroup %s: %w", filepath.Dir(procs), err)
		}
	}
	if _, err := g.w.Write([]byte("\n")); err != nil {
		return fmt.Errorf("start the command: %w", err)
	}
	return g.w.Close()
}

func (g *cgroupGate) close() {
	g.r.Close()
	g.w.Close()
}
