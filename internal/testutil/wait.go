// Package testutil holds helpers shared by gpud's tests: waits with
// deadlines, temporary directories, free ports, the static gpud binary and
// the registering agent processes it runs. It is imported only by
// _test.go files and test harnesses and must not import daemon.
package testutil

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// MinEventually is the least time Eventually waits before it fails: its
// bound is a safety net against a hang, never a claim about speed, and a
// machine loaded by other work (2 shared cores, a parallel suite) may take
// many times longer than an idle one for the same events. A passing test
// never waits for it.
const MinEventually = 2 * time.Minute

// Eventually calls cond until it returns nil or timeout passes (at least
// MinEventually), then fails the test with the last error. It never sleeps
// longer than 50ms between tries.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	timeout = max(timeout, MinEventually)
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(wait)
		if wait < 50*time.Millisecond {
			wait *= 2
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Errorf is fmt.Errorf, re-exported so conditions passed to Eventually read tersely.
func Errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
