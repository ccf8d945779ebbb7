package daemon

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"gpud.dev/gpud/internal/testutil"
)

// TestProbesReachOnlyTheReplica: a probe whose url names another address
// still goes to the replica's own port (as a path), never to that
// address; the replica becomes ready on the replica's answer, and the API
// says so.
func TestProbesReachOnlyTheReplica(t *testing.T) {
	ts := startServer(t, "")
	var hits atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}))
	defer other.Close()
	ts.submit(serviceConfig(t, "probed", freeLoopbackPort(t),
		fmt.Sprintf("auth: false\nprobes:\n  - {url: '%s/x', interval: 1s}\n", other.URL)))
	ts.waitRun("probed", "running", "", 60*time.Second)
	testutil.Eventually(t, 30*time.Second, func() error {
		jobs := ts.getRun("probed").Jobs
		if len(jobs) != 1 || jobs[0].Ready == nil || !*jobs[0].Ready {
			return fmt.Errorf("the replica is not ready yet: %+v", jobs)
		}
		return nil
	})
	if n := hits.Load(); n != 0 {
		t.Errorf("a probe reached another address %d times", n)
	}
}
