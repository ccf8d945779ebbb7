package testutil

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// KillJobsUnder kills, with their descendants, the process runtime's job
// shims whose last argument is a job directory under dataDir (an agent's
// or a server's data dir: "gpud agent shim <dataDir>/jobs/<id>", or a test
// binary acting as the shim). Shims outlive their agent by design (a
// restarted agent adopts its jobs), so a test that ends its agent leaves
// them, and the jobs under them, running for good.
func KillJobsUnder(dataDir string) {
	if dataDir == "" {
		return
	}
	prefix := filepath.Clean(dataDir) + string(filepath.Separator)
	children := map[int][]int{}
	var shims []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			// ppid is the 2nd field after the parenthesised command name.
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
				if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
					if ppid, err := strconv.Atoi(f[1]); err == nil {
						children[ppid] = append(children[ppid], pid)
					}
				}
			}
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
		if last := args[len(args)-1]; len(args) > 1 && strings.HasPrefix(last, prefix) &&
			filepath.Base(filepath.Dir(last)) == "jobs" {
			shims = append(shims, pid)
		}
	}
	var kill func(pid int)
	kill = func(pid int) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for _, c := range children[pid] {
			kill(c)
		}
	}
	for _, pid := range shims {
		kill(pid)
	}
}
