package gpu

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time used by this process and by its waited-for children.
func processCPU() (self, children time.Duration, err error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, err
	}
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0, 0, err
	}
	return self, time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
