package daemon

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// freeLoopbackPort returns a TCP port free on 127.0.0.1 now.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// logsOf waits for the run to reach want and returns its output lines.
func (ts *testServer) logsOf(run, want string) string {
	ts.t.Helper()
	ts.waitRun(run, want, "", 60*time.Second)
	return strings.Join(lineTexts(ts.getLogs(run, "")), "\n")
}

// TestRunFieldsTakeEffectInsideTheJob: the fields every run has that
// need no subsystem — name, env, shell, commands, cpu and memory — are
// seen from inside the job: it prints what it got.
func TestRunFieldsTakeEffectInsideTheJob(t *testing.T) {
	ts := startServer(t, "")
	ts.submit(`type: task
name: fx
shell: /bin/bash
env:
  - GREETING=hello world
  - EMPTY=
commands:
  - echo "run=$DSTACK_RUN_NAME greeting=$GREETING bash=${BASH_VERSION:+yes}"
  - echo second command
  - |
    echo "memlimit=$(cat /sys/fs/cgroup/memory$(grep ':memory:' /proc/self/cgroup | cut -d: -f3)/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup | head -1)/memory.max)"
resources:
  cpu: 1..
  memory: 64MB..256MB
  disk: 1GB..
`)
	out := ts.logsOf("fx", "done")
	for _, want := range []string{"run=fx greeting=hello world bash=yes", "second command", "memlimit=268435456"} {
		if !strings.Contains(out, want) {
			t.Errorf("the job's output lacks %q:\n%s", want, out)
		}
	}
	// The scheduler reads cpu: a run that asks for more cores than any
	// host has waits, and says so.
	ts.submit("type: task\nname: big\ncommands: [true]\nresources:\n  cpu: 100000..\n  memory: 1MB..\n  disk: 1GB..\n")
	testutil.Eventually(t, 30*time.Second, func() error {
		r := ts.getRun("big")
		if len(r.Jobs) == 0 || !strings.Contains(r.Jobs[0].WhyPending, "CPU") {
			return fmt.Errorf("run big is %s, why pending %q", r.Status, jobsWhy(r))
		}
		return nil
	})
}

func jobsWhy(r api.Run) string {
	var out []string
	for _, j := range r.Jobs {
		out = append(out, j.WhyPending)
	}
	return strings.Join(out, "; ")
}

// TestTaskGroupsRunTheirOwnCommands: each group of a task runs its own
// commands with its own env, the API names each job's group, and the
// ranks follow the groups' order.
func TestTaskGroupsRunTheirOwnCommands(t *testing.T) {
	ts := startServer(t, "")
	ts.submit(`type: task
name: grp
env: [SHARED=s]
groups:
  - name: head
    nodes: 1
    env: [ROLE=head]
    commands: ['echo "group $ROLE rank $DSTACK_NODE_RANK of $DSTACK_NODES_NUM shared $SHARED"']
    resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
  - name: worker
    nodes: 2
    env: [ROLE=worker]
    commands: ['echo "group $ROLE rank $DSTACK_NODE_RANK of $DSTACK_NODES_NUM shared $SHARED"']
    resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
`)
	out := ts.logsOf("grp", "done")
	for _, want := range []string{"group head rank 0 of 3 shared s", "group worker rank 1 of 3 shared s", "group worker rank 2 of 3 shared s"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	groups := map[int]string{}
	for _, j := range ts.getRun("grp").Jobs {
		groups[j.NodeRank] = j.Group
	}
	if groups[0] != "head" || groups[1] != "worker" || groups[2] != "worker" {
		t.Errorf("the API's groups by rank: %v", groups)
	}
}

// proxyGet fetches path through the server's service proxy with the
// Authorization header auth ("" for none).
func (ts *testServer) proxyGet(path, auth string) (int, string) {
	ts.t.Helper()
	req, err := http.NewRequest("GET", ts.URL()+path, nil)
	if err != nil {
		ts.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// serviceConfig is a service that answers with the path and
// Authorization header it received: the test binary as an echo server
// (TestMain's echoServeArg).
func serviceConfig(t *testing.T, name string, port int, extra string) string {
	return fmt.Sprintf(`type: service
name: %[1]s
port: %[2]d
commands:
  - exec %[4]s %[5]s 127.0.0.1:%[2]d
resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
%[3]s`, name, port, extra, echoBinary(t), echoServeArg)
}

// echoBinary is a copy of the test binary that any user may run (process
// jobs run as nobody; the build directory is private).
func echoBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gpud-echo-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "echo-server")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// echoServeArg makes the test binary an HTTP server that answers
// "path=<path> auth=<Authorization>" (see TestMain).
const echoServeArg = "echo-serve"

func echoServe(addr string) int {
	err := http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "path=%s auth=%s\n", r.URL.Path, r.Header.Get("Authorization"))
	}))
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// TestServiceFieldsTakeEffectThroughTheProxy: a service's port, auth and
// strip_prefix decide what the server's proxy does; gateway: false is
// what it does anyway, and the plan says where the service is reachable.
func TestServiceFieldsTakeEffectThroughTheProxy(t *testing.T) {
	ts := startServer(t, "")
	var plan api.RunPlan
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(serviceConfig(t, "web", 1, "gateway: false\n")), &plan)
	if !strings.Contains(strings.Join(plan.Notes, "\n"), "/proxy/services/main/web/") {
		t.Errorf("the plan's notes do not say where the service is reachable: %q", plan.Notes)
	}

	closed, open := freeLoopbackPort(t), freeLoopbackPort(t)
	ts.submit(serviceConfig(t, "closed", closed, "gateway: false\n"))
	ts.submit(serviceConfig(t, "open", open, "auth: false\nstrip_prefix: false\n"))
	ts.waitRun("closed", "running", "", 60*time.Second)
	ts.waitRun("open", "running", "", 60*time.Second)
	get := func(path, auth string) (int, string) {
		var code int
		var body string
		testutil.Eventually(t, 30*time.Second, func() error {
			code, body = ts.proxyGet(path, auth)
			if code == http.StatusServiceUnavailable || code == http.StatusBadGateway {
				return fmt.Errorf("%s: %d %s", path, code, body)
			}
			return nil
		})
		return code, body
	}

	// auth (default true): no token, no answer; with a member's token the
	// service gets the stripped path and never sees the token.
	if code, _ := get("/proxy/services/main/closed/cgi-bin/echo", ""); code != http.StatusUnauthorized {
		t.Errorf("a service with auth answered a request without a token: %d", code)
	}
	code, body := get("/proxy/services/main/closed/cgi-bin/echo", "Bearer "+ts.admin)
	if code != http.StatusOK || strings.TrimSpace(body) != "path=/cgi-bin/echo auth=" {
		t.Errorf("through the proxy with a token: %d %q, want the stripped path and no token", code, body)
	}

	// auth: false: anyone reaches it, its own Authorization header goes
	// through, a gpud token does not; strip_prefix: false keeps the path.
	code, body = get("/proxy/services/main/open/cgi-bin/echo", "")
	if code != http.StatusOK || !strings.Contains(body, "path=/proxy/services/main/open/cgi-bin/echo") {
		t.Errorf("an auth: false, strip_prefix: false service without a token: %d %q", code, body)
	}
	if _, body = get("/proxy/services/main/open/cgi-bin/echo", "Bearer app-key"); !strings.Contains(body, "auth=Bearer app-key") {
		t.Errorf("the service's own API key did not reach it: %q", body)
	}
	if _, body = get("/proxy/services/main/open/cgi-bin/echo", "Bearer "+ts.admin); strings.Contains(body, ts.admin) {
		t.Errorf("a gpud token reached an open service's code: %q", body)
	}
}

// TestServiceReplicaGroupsRunTheirOwnCommands: a service's replica groups
// start their counts of replicas, each with its group's commands, env and
// name.
func TestServiceReplicaGroupsRunTheirOwnCommands(t *testing.T) {
	ts := startServer(t, "")
	ts.submit(`type: service
name: rg
port: 8000
env: [SHARED=s]
replicas:
  - name: router
    count: 1
    env: [ROLE=router]
    commands: ['echo "replica $ROLE shared $SHARED"', sleep 300]
    resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
  - name: worker
    count: 2
    env: [ROLE=worker]
    commands: ['echo "replica $ROLE shared $SHARED"', sleep 300]
    resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
`)
	ts.waitRun("rg", "running", "", 60*time.Second)
	testutil.Eventually(t, 30*time.Second, func() error {
		out := strings.Join(lineTexts(ts.getLogs("rg", "")), "\n")
		if strings.Count(out, "replica router shared s") != 1 || strings.Count(out, "replica worker shared s") != 2 {
			return fmt.Errorf("want one router and two workers, got:\n%s", out)
		}
		return nil
	})
	count := map[string]int{}
	for _, j := range ts.getRun("rg").Jobs {
		count[j.Group]++
	}
	if count["router"] != 1 || count["worker"] != 2 || len(count) != 2 {
		t.Errorf("the API's replicas by group: %v", count)
	}
}
