package daemon

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// fleetService is a service on port that serves a page naming its host,
// on a host with a GPU (the server's own has none).
func fleetService(name string, port int) string {
	return fmt.Sprintf(`type: service
name: %s
port: %d
commands:
  - mkdir -p www && echo "served by $(hostname)" > www/index.html
  - exec busybox httpd -f -p %d -h www
resources:
  gpu: 1
  cpu: 0..
  memory: 1MB..
  disk: 1GB..
`, name, port, port)
}

// serviceAnswer waits until run is running and its page answers through
// the server's /proxy/services/main/<run>/, and returns the page.
func serviceAnswer(t *testing.T, ts *testServer, name string) (string, api.Run) {
	t.Helper()
	var body string
	var run api.Run
	testutil.Eventually(t, 90*time.Second, func() error {
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/"+name, nil, &run)
		if finishedRun(run.Status) {
			t.Fatalf("the service ended: %s (%s)", run.Status, run.Reason)
		}
		if run.Status != "running" {
			return testutil.Errorf("run %s (%s)", run.Status, run.Reason)
		}
		req, err := http.NewRequest("GET", ts.URL()+"/proxy/services/main/"+name+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+ts.admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("proxy: %d %s", resp.StatusCode, b)
		}
		body = strings.TrimSpace(string(b))
		return nil
	})
	return body, run
}

// TestServiceOnAnSSHFleetHostAnswersThroughTheServer: a service whose
// replica runs on an SSH fleet's host (an sshd container; its port binds
// on that host only, which the server cannot reach) answers at
// /proxy/services/<project>/<run>/: the server dials the replica's port
// through the host's agent (dialJobPort, the agent's port relay over its
// SSH link), never 127.0.0.1 on its own host.
func TestServiceOnAnSSHFleetHostAnswersThroughTheServer(t *testing.T) {
	c := startSSHCluster(t, 1, "1xH100:80GB")
	c.must(http.StatusCreated, c.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(fleetService("fleet-svc", 8000)), nil)
	body, run := serviceAnswer(t, c.testServer, "fleet-svc")
	host := c.hostOf(t, run.Jobs[0].Instance)
	if me, _ := os.Hostname(); !strings.HasPrefix(body, "served by ") || strings.TrimPrefix(body, "served by ") == me {
		t.Fatalf("the proxy answered %q; want the fleet host's page (host %s), not this machine's (%s)", body, host.IP, me)
	}
}

// TestServiceOnARegisteredHostAnswersThroughTheServer: the same for a
// host that registered with `gpud agent --server`: the relay goes over
// the registration tunnel, the one connection the host dialed out.
func TestServiceOnARegisteredHostAnswersThroughTheServer(t *testing.T) {
	rs := startRegServer(t, Options{})
	tok := rs.fleetWithToken(rs.admin, "main", "metal")
	_, _, agentOut := rs.agent(tok.Token, "", "metalhost", "1xH100:80GB")
	inst := rs.waitInstances("main", "metal", 1, agentOut)[0]
	l, err := net.Listen("tcp", "127.0.0.1:0") // the agent runs on this machine: a free port
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	rs.must(http.StatusCreated, rs.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(fleetService("metal-svc", port)), nil)
	body, run := serviceAnswer(t, rs.testServer, "metal-svc")
	if run.Jobs[0].Instance != inst.ID || !strings.HasPrefix(body, "served by ") {
		t.Fatalf("the service runs on %s (want the registered host %s) and answered %q\nagent:\n%s", run.Jobs[0].Instance, inst.ID, body, agentOut.String())
	}
}
