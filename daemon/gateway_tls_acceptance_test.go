package daemon

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// replicasAnswering sends rounds of concurrent GETs to url until every
// answer is 200 and want distinct bodies were seen (bounded: 20 rounds of
// 8); it fails the test on a non-200 answer when failOnError.
func replicasAnswering(t *testing.T, cl *http.Client, url string, want int, failOnError bool) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	var mu sync.Mutex
	for round := 0; round < 20 && len(seen) < want; round++ {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := cl.Get(url)
				if err != nil {
					if failOnError {
						t.Errorf("GET %s: %v", url, err)
					}
					return
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					if failOnError {
						t.Errorf("GET %s: %s %s", url, resp.Status, b)
					}
					return
				}
				mu.Lock()
				seen[strings.TrimSpace(string(b))] = true
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	return seen
}

// TestServiceWithTwoReplicasOverHTTPSFromPebbleBalancesKeepsServingAndSurvivesARestart
// is issue 16's first acceptance check, end to end on the process runtime
// with Debian's pebble: a service with two replicas behind
// https://svc.gpud.test gets its certificate from pebble, answers with TLS
// that chains to pebble's root, answers from both replicas, keeps
// answering while one replica is stopped, and serves the same certificate
// after a server restart without a new order.
func TestServiceWithTwoReplicasOverHTTPSFromPebbleBalancesKeepsServingAndSurvivesARestart(t *testing.T) {
	httpPort, httpsPort := testutil.FreePort(t), testutil.FreePort(t)
	httpsAddr := fmt.Sprintf("127.0.0.1:%d", httpsPort)
	pb := testutil.StartPebble(t, httpPort, httpsPort)
	opts := Options{Runtime: "process", DataDir: t.TempDir(), Domain: "gpud.test",
		HTTPSListen: httpsAddr, HTTPListen: fmt.Sprintf("127.0.0.1:%d", httpPort),
		ACMECA: pb.Directory, ACMECARoot: pb.ListenerCAFile}
	first, restart := startServerToRestart(t, opts)
	first.submit(replicaService(echoBinary(t), "svc", freeLoopbackPort(t), "v1", "replicas: 2\n"))
	first.waitRun("svc", "running", "", 60*time.Second)

	cl := gatewayClient(t, pb.Root(t), httpsAddr)
	_, leaf := gatewayGet(t, cl, "https://svc.gpud.test/")
	if leaf.DNSNames[0] != "svc.gpud.test" || pb.Orders() != 1 {
		t.Fatalf("certificate for %v, %d orders", leaf.DNSNames, pb.Orders())
	}
	want := map[string]bool{"version=v1 replica=0": true, "version=v1 replica=1": true}
	var seen map[string]bool
	testutil.Eventually(t, 60*time.Second, func() error {
		seen = replicasAnswering(t, cl, "https://svc.gpud.test/", 2, false)
		for b := range want {
			if !seen[b] {
				return fmt.Errorf("answers %v: %q never answered", seen, b)
			}
		}
		return nil
	})

	// Stop one replica: every request still gets an answer.
	var stopped string
	for _, j := range first.store.Jobs().ByRun(first.runID(t, "svc")) {
		if j.Status == store.JobRunning {
			stopped = j.ID
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := first.hosts.local.agent.Stop(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	if _, err := first.hosts.local.agent.Wait(ctx, stopped); err != nil {
		t.Fatal(err)
	}
	if got := replicasAnswering(t, cl, "https://svc.gpud.test/", 1, true); len(got) == 0 {
		t.Fatal("no answer with one replica stopped")
	}

	orders := pb.Orders()
	restart()
	second := startServerWith(t, opts)
	second.admin = first.admin
	_, again := gatewayGet(t, gatewayClient(t, pb.Root(t), httpsAddr), "https://svc.gpud.test/")
	if again.SerialNumber.Cmp(leaf.SerialNumber) != 0 || pb.Orders() != orders {
		t.Fatalf("after a restart: serial %s (was %s), %d orders (was %d)", again.SerialNumber, leaf.SerialNumber, pb.Orders(), orders)
	}
}

// runID is the id of the project main's run name.
func (ts *testServer) runID(t *testing.T, name string) string {
	t.Helper()
	r, err := ts.runsAPI.findRun(DefaultProject, name)
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}
