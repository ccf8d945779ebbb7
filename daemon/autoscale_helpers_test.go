package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// replicaServeArg makes the test binary a service replica (see TestMain):
// `replica-serve ADDR VERSION` answers "version=VERSION replica=N", and
// /health with 200 to a POST of body "ping" with header X-Probe: gpud
// (400 to anything else), or 503 when VERSION starts with "broken". It
// listens with SO_REUSEPORT, so replicas of one service share its port on
// the process runtime (which publishes a job's port as itself).
const replicaServeArg = "replica-serve"

func replicaServe(addr, version string) int {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	replica := os.Getenv("GPUD_REPLICA_NUM")
	err = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			b, _ := io.ReadAll(r.Body)
			if r.Method != http.MethodPost || r.Header.Get("X-Probe") != "gpud" || string(b) != "ping" {
				http.Error(w, fmt.Sprintf("want POST with X-Probe and ping, got %s %q %q", r.Method, r.Header.Get("X-Probe"), b), http.StatusBadRequest)
				return
			}
			if strings.HasPrefix(version, "broken") {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
			return
		}
		fmt.Fprintf(w, "version=%s replica=%s\n", version, replica)
	}))
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// replicaService is a service of replica-serve replicas on port.
func replicaService(bin, name string, port int, version, extra string) string {
	return fmt.Sprintf(`type: service
name: %[1]s
port: %[2]d
auth: false
commands:
  - exec %[3]s %[4]s 127.0.0.1:%[2]d %[5]s
resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
%[6]s`, name, port, bin, replicaServeArg, version, extra)
}

// fakeRates is the gateway's request rates as a test sets them.
type fakeRates struct {
	mu sync.Mutex
	m  map[string]float64
}

func (f *fakeRates) set(key string, r float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]float64{}
	}
	f.m[key] = r
}

func (f *fakeRates) Rate(key string) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[key]
}

// activeReplicas lists the run's replicas that are not retired nor
// finished, by status.
func (ts *testServer) activeReplicas(name string) map[string]int {
	ts.t.Helper()
	run := ts.getRun(name)
	out := map[string]int{}
	for _, j := range ts.store.Jobs().ByRun(run.ID) {
		js, err := jobSpecOf(j)
		if err != nil {
			ts.t.Fatal(err)
		}
		if !js.Retired && !finishedJob(j.Status) {
			out[j.Status]++
		}
	}
	return out
}

// waitReplicas waits until the run has exactly n active replicas, all
// running.
func (ts *testServer) waitReplicas(name string, n int, within time.Duration) {
	ts.t.Helper()
	testutil.Eventually(ts.t, within, func() error {
		got := ts.activeReplicas(name)
		if got[store.JobRunning] != n || len(got) > 1 || (n == 0 && len(got) != 0) {
			return fmt.Errorf("run %s: active replicas %v, want %d running", name, got, n)
		}
		return nil
	})
}

// waitEvent waits for an event of the run whose reason contains all of
// words, and returns it.
func (ts *testServer) waitEvent(name string, within time.Duration, words ...string) api.Event {
	ts.t.Helper()
	var found api.Event
	testutil.Eventually(ts.t, within, func() error {
		var reasons []string
		for _, e := range ts.runEvents(name) {
			ok := true
			for _, w := range words {
				ok = ok && strings.Contains(e.Reason, w)
			}
			if ok {
				found = e
				return nil
			}
			reasons = append(reasons, e.Reason)
		}
		return fmt.Errorf("no event of %s says %q; events:\n%s", name, words, strings.Join(reasons, "\n"))
	})
	return found
}

// body200 GETs path through the server's proxy until it answers 200
// (no replica ready yet answers 503), and returns the body.
func (ts *testServer) body200(t *testing.T, path string, within time.Duration) string {
	t.Helper()
	var body string
	testutil.Eventually(t, within, func() error {
		var code int
		code, body = ts.proxyGet(path, "")
		if code != http.StatusOK {
			return fmt.Errorf("%s: %d %s", path, code, body)
		}
		return nil
	})
	return body
}
