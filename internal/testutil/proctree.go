package testutil

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// KillJobsUnder kills, with their descendants, the process runtime's job
// shims whose command line names a directory under dataDir (an agent's
// data dir: "gpud agent shim <dataDir>/jobs/<id>"). Shims outlive their
// agent by design (a restarted agent adopts its jobs), so a test that
// kills an agent leaves them, and the jobs under them, running for good.
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
		args := strings.Split(string(cmdline), "\x00")
		for i, a := range args {
			if a == "shim" && i+1 < len(args) && strings.HasPrefix(args[i+1], prefix) {
				shims = append(shims, pid)
				break
			}
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
