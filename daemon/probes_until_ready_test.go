package daemon

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/internal/testutil"
)

// TestProbeUntilReadyStopsProbingOnceReady: a probe with until_ready:
// true runs until it has passed ready_after times and never again, so its
// replica stays ready when the health check would now fail; the same
// probe without it keeps probing, and its replica leaves the gateway.
func TestProbeUntilReadyStopsProbingOnceReady(t *testing.T) {
	ts := startServer(t, "")
	bin := echoBinary(t)
	probe := func(untilReady bool) string {
		return fmt.Sprintf("probes:\n  - url: /health\n    interval: 1s\n    ready_after: 2\n    until_ready: %v\n", untilReady)
	}
	oncePort, alwaysPort := freeLoopbackPort(t), freeLoopbackPort(t)
	ts.submit(modelServiceConfig(bin, "once", "m/once", oncePort, "auth: false\n"+probe(true)))
	ts.submit(modelServiceConfig(bin, "always", "m/always", alwaysPort, "auth: false\n"+probe(false)))
	ts.waitRun("once", "running", "", 60*time.Second)
	ts.waitRun("always", "running", "", 60*time.Second)
	call := func(name string) int {
		resp := ts.modelPost("main", "v1/chat/completions", ts.admin, `{"model":"m/`+name+`"}`)
		readAll(t, resp)
		return resp.StatusCode
	}
	direct := func(port int, path string) string {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	for _, name := range []string{"once", "always"} {
		testutil.Eventually(t, 60*time.Second, func() error {
			if code := call(name); code != http.StatusOK {
				return fmt.Errorf("%s: %d, not ready yet", name, code)
			}
			return nil
		})
	}
	direct(oncePort, "/break")
	direct(alwaysPort, "/break")
	// The probe that keeps running sees the failure and takes its replica
	// out of the gateway.
	testutil.Eventually(t, 60*time.Second, func() error {
		if code := call("always"); code != http.StatusServiceUnavailable {
			return fmt.Errorf("always: %d, still served", code)
		}
		return nil
	})
	if hits, err := strconv.Atoi(direct(alwaysPort, "/hits")); err != nil || hits < 3 {
		t.Errorf("the probe without until_ready ran %d times (%v), want at least 3 (2 to pass, 1 to fail)", hits, err)
	}
	// Meanwhile the until_ready probe ran exactly ready_after times, and
	// its replica still serves.
	if hits := direct(oncePort, "/hits"); hits != "2" {
		t.Errorf("the until_ready probe ran %s times, want 2 (ready_after) and no more", hits)
	}
	if code := call("once"); code != http.StatusOK {
		t.Errorf("the until_ready replica after its health check broke: %d, want still served", code)
	}
}
