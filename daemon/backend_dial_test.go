package daemon

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestServiceOnABackendIsReachedThroughThePluginsDial: a service runs on
// a job backend that advertises service (the external test plugin, whose
// jobs are real local processes): its replica is started as a gang with
// Service set, and the gateway reaches it at /proxy/services through the
// backend's DialPort (a bidirectional gRPC stream over go-plugin): the
// server has no host, no agent and no other path to the replica's port.
func TestServiceOnABackendIsReachedThroughThePluginsDial(t *testing.T) {
	bs := startBackendServer(t, 8)
	port := freeLoopbackPort(t)
	bs.submit(fmt.Sprintf("type: service\nname: bsvc\nport: %d\nauth: false\nstrip_prefix: false\ncommands:\n  - exec %s %s 127.0.0.1:%d\nresources:\n  gpu: A100:1\n",
		port, echoBinary(t), echoServeArg, port))
	r := bs.waitRun("bsvc", "running", "", 2*time.Minute)
	if len(r.Jobs) != 1 || !strings.HasPrefix(r.Jobs[0].Instance, backendNodePrefix+"main/lab/") {
		t.Fatalf("the service's replica is not on backend lab: %+v", r.Jobs)
	}
	gangs, err := filepath.Glob(filepath.Join(bs.stateDir, "*.json"))
	if err != nil || len(gangs) != 1 {
		t.Fatalf("the engine's gangs: %v %v", gangs, err)
	}
	data, err := os.ReadFile(gangs[0])
	if err != nil || !strings.Contains(string(data), `"service":true`) {
		t.Fatalf("the gang was not started as a service: %s %v", data, err)
	}
	testutil.Eventually(t, time.Minute, func() error {
		code, body := bs.proxyGet("/proxy/services/main/bsvc/hello", "")
		if code != http.StatusOK || !strings.Contains(body, "path=/proxy/services/main/bsvc/hello") {
			return fmt.Errorf("GET through the gateway: %d %q", code, body)
		}
		return nil
	})
	bs.must(http.StatusOK, bs.admin, "POST", "/api/v1/projects/main/runs/bsvc/stop", api.StopRunRequest{}, nil)
	bs.waitRun("bsvc", "terminated", "", 2*time.Minute)
}
