package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"gpud.dev/gpud/agent/runtime"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat times; 100 on every
// Linux architecture gpud supports.
const clockTicks = 100

// procStat holds the fields of /proc/PID/stat the runtime reads.
type procStat struct {
	pgrp       int
	utime      uint64
	stime      uint64
	startTicks uint64
	rssPages   int64
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 22 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	// f[0] is field 3 (state); field n is f[n-3].
	num := func(n int) uint64 { v, _ := strconv.ParseUint(f[n-3], 10, 64); return v }
	return procStat{
		pgrp:       int(num(5)),
		utime:      num(14),
		stime:      num(15),
		startTicks: num(22),
		rssPages:   int64(num(24)),
	}, nil
}

// alive reports whether pid runs and is the same process that started at
// startTicks (a reused pid is not).
func alive(pid int, startTicks uint64) bool {
	st, err := readProcStat(pid)
	return err == nil && st.startTicks == startTicks
}

// groupUsage sums CPU time and resident memory over every process whose
// process group is pgid.
func groupUsage(pgid int) (runtime.Usage, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return runtime.Usage{}, err
	}
	var u runtime.Usage
	page := int64(os.Getpagesize())
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.pgrp != pgid {
			continue
		}
		u.CPUSeconds += float64(st.utime+st.stime) / clockTicks
		u.MemoryBytes += st.rssPages * page
	}
	return u, nil
}

// waitExit blocks until the process pid (which is not our child) exits,
// using a pidfd: the kernel wakes us, nothing polls.
func waitExit(ctx context.Context, pid int, startTicks uint64) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if !alive(pid, startTicks) { // the pid was reused before we opened it
		return nil
	}
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		// Wake every second only to notice a cancelled ctx.
		n, err := unix.Poll(fds, 1000)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll pidfd %d: %w", pid, err)
		}
		if n > 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
