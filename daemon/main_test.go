package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"gpud.dev/gpud/agent/runtime/process"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestMain lets the test binary act as the process runtime's shim, which
// the runtime starts as "<executable> agent shim <dir>", and as a server
// process for the restart test (serveForTest).
func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == "agent" && os.Args[2] == "shim" {
		os.Exit(process.RunShim(os.Args[3]))
	}
	if len(os.Args) == 3 && os.Args[1] == echoServeArg {
		os.Exit(echoServe(os.Args[2]))
	}
	if len(os.Args) == 4 && os.Args[1] == replicaServeArg {
		os.Exit(replicaServe(os.Args[2], os.Args[3]))
	}
	if len(os.Args) == 4 && os.Args[1] == modelServeArg {
		os.Exit(modelServe(os.Args[2], os.Args[3]))
	}
	if dir := os.Getenv(envServeDir); dir != "" {
		os.Exit(serveForTest(dir, os.Getenv(envServeListen)))
	}
	os.Exit(m.Run())
}

// testServer is a real server (real bbolt file, real HTTP, a local agent
// with the process runtime and fake GPUs) in a temporary directory.
type testServer struct {
	*Server
	t     testing.TB
	admin string
}

func startServer(t testing.TB, fakeGPUs string) *testServer {
	t.Helper()
	return startServerWith(t, Options{FakeGPUs: fakeGPUs, Runtime: "process"})
}

// startServerWith starts a server with opts in a temporary directory
// (listening on a free loopback port, resyncing every 2s; the zero Logger
// drops logs).
func startServerWith(t testing.TB, opts Options) *testServer {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	opts.Listen = "127.0.0.1:0"
	if opts.ResyncInterval == 0 {
		opts.ResyncInterval = 2 * time.Second
	}
	srv, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	t.Cleanup(func() {
		// Stop every job so no process outlives the test.
		for _, r := range srv.store.Runs().List() {
			if !finishedRun(r.Status) {
				muts, err := srv.reconciler.stopMutations(r, true, "test cleanup")
				if err != nil {
					t.Logf("cleanup: stop run %s: %v", r.ID, err) // a test that corrupted it on purpose
					continue
				}
				_, _ = srv.store.Apply(context.Background(), muts...)
			}
		}
		if srv.hosts.local != nil {
			// Stop and wait for every job the local agent has, so no shim
			// is still writing into the data dir when t.TempDir removes it.
			waitCtx, cancelWait := context.WithTimeout(context.Background(), 20*time.Second)
			for _, j := range srv.hosts.local.agent.List() {
				_, _ = srv.hosts.local.agent.Stop(waitCtx, j.ID)
				_, _ = srv.hosts.local.agent.Wait(waitCtx, j.ID)
			}
			cancelWait()
		}
		cancel()
		<-done
		removeContainers(t, srv)
		testutil.KillJobsUnder(opts.DataDir) // what a stop could not end (a run placed during the stops)
	})
	return &testServer{Server: srv, t: t, admin: srv.AdminToken()}
}

// call sends body (a value, raw []byte, or nil) and decodes the answer
// into out when out is not nil; it returns the status and the error body.
func (ts *testServer) call(token, method, path string, body, out any) (int, api.ServerError) {
	ts.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			ts.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, ts.URL()+path, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var se api.ServerError
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(data, &se); err != nil {
			ts.t.Fatalf("%s %s: %d with a body that is not an API error %q: %v", method, path, resp.StatusCode, data, err)
		}
	} else if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			ts.t.Fatalf("%s %s: decode %q: %v", method, path, data, err)
		}
	}
	return resp.StatusCode, se
}

// must calls and fails the test unless the status is want.
func (ts *testServer) must(want int, token, method, path string, body, out any) {
	ts.t.Helper()
	if got, se := ts.call(token, method, path, body, out); got != want {
		ts.t.Fatalf("%s %s: status %d (%s), want %d", method, path, got, se.Error(), want)
	}
}

// user creates a user and returns its token.
func (ts *testServer) user(name string) string {
	var ut api.UserToken
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/users", api.CreateUserRequest{Name: name}, &ut)
	return ut.Token
}

func yamlApply(yaml string) api.ApplyRunRequest {
	return api.ApplyRunRequest{ApplyRequest: api.ApplyRequest{ConfigurationYAML: yaml, Filename: "test.yml"}}
}

func sleepTask(name, queue string, gpus int) string {
	return fmt.Sprintf("type: task\nname: %s\nqueue: %s\ncommands: [sleep 300]\nresources:\n  cpu: 0..\n  memory: 1MB..\n  disk: 1GB..\n  gpu: %d\n", name, queue, gpus)
}
