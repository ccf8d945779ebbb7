package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// routerHandler is the test's SGLang router: busybox nc runs it once per
// connection (nc -ll -e). It speaks the /workers API surface dstack uses
// (GET lists {"workers": [{id, url}]}, POST registers and answers 202
// {"status": "accepted"}, DELETE /workers/{id} removes), logs each
// registration's body and each removal, and forwards any other request
// to every registered worker, answering with what they said.
const routerHandler = `#!/bin/sh
read -r method path proto
len=0
while IFS= read -r line; do
  line=$(printf %s "$line" | tr -d '\r')
  [ -z "$line" ] && break
  case "$line" in [Cc]ontent-[Ll]ength:*) len=$(echo "${line#*:}" | tr -d ' ');; esac
done
body=
[ "$len" -gt 0 ] && body=$(head -c "$len")
reply() { printf 'HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %s\r\nConnection: close\r\n\r\n%s' "$1" "${#2}" "$2"; }
mkdir -p /tmp/w
case "$method $path" in
"GET /workers")
  list=
  for f in /tmp/w/*; do [ -f "$f" ] || continue; list="$list${list:+,}{\"id\":\"${f##*/}\",\"url\":\"$(cat "$f")\"}"; done
  reply "200 OK" "{\"workers\":[$list]}";;
"POST /workers")
  id="w$(date +%s)$$"
  echo "$body" | sed -n 's/.*"url":"\([^"]*\)".*/\1/p' > /tmp/w/$id
  echo "REGISTER $body" >&2
  reply "202 Accepted" '{"status":"accepted"}';;
"DELETE /workers/"*)
  id=${path#/workers/}
  echo "DEREGISTER $(cat /tmp/w/$id)" >&2
  rm -f /tmp/w/$id
  reply "202 Accepted" '{"status":"accepted"}';;
*)
  out=
  for f in /tmp/w/*; do [ -f "$f" ] || continue; out="$out [$(wget -q -O - "$(cat "$f")$path")]"; done
  reply "200 OK" "router forwarded:$out";;
esac
`

// workerHandler is a worker replica: /server_info answers as SGLang's
// does for its $MODE (prefill with its bootstrap port), anything else
// names the worker; /quit makes the decode worker end (its main command
// waits for /tmp/quit).
const workerHandler = `#!/bin/sh
read -r method path proto
while IFS= read -r line; do
  line=$(printf %s "$line" | tr -d '\r')
  [ -z "$line" ] && break
done
reply() { printf 'HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %s\r\nConnection: close\r\n\r\n%s' "$1" "${#2}" "$2"; }
case "$path" in
/server_info)
  extra=
  [ "$MODE" = prefill ] && extra=',"disaggregation_bootstrap_port":8998'
  reply "200 OK" "{\"status\":\"ready\",\"disaggregation_mode\":\"$MODE\"$extra}";;
/quit)
  [ "$MODE" = decode ] && touch /tmp/quit
  reply "200 OK" "worker $MODE quits";;
*)
  reply "200 OK" "worker $MODE path=$path";;
esac
`

// scriptCommand is one command (a YAML block) that writes handler and
// serves it on port 8000 with busybox nc, until /tmp/quit appears.
func scriptCommand(handler string) string {
	var b strings.Builder
	b.WriteString("      - |\n        cat > /tmp/h.sh <<'EOF'\n")
	for _, l := range strings.Split(strings.TrimSuffix(handler, "\n"), "\n") {
		b.WriteString("        " + l + "\n")
	}
	b.WriteString("        EOF\n        chmod +x /tmp/h.sh\n        rm -f /tmp/quit\n")
	b.WriteString("        nc -ll -p 8000 -e /tmp/h.sh &\n")
	b.WriteString("        until [ -f /tmp/quit ]; do sleep 0.2; done\n        sleep 1\n        kill $!\n")
	return b.String()
}

// TestRouterGroupTakesTheTrafficAndLearnsItsWorkers: a service with an
// SGLang router group and a prefill and a decode group, on three SSH
// fleet hosts (each its own network). The server registers each worker
// with the router through its /workers API with dstack's body (the
// worker's host address and port; prefill with its bootstrap port), the
// gateway's traffic reaches the router only (which forwards it to the
// workers), and a worker that ends is removed from the router.
func TestRouterGroupTakesTheTrafficAndLearnsItsWorkers(t *testing.T) {
	c := startSSHCluster(t, 3, "1xH100:80GB")
	res := "    resources: {gpu: 1, cpu: 0.., memory: 1MB.., disk: 1GB..}\n"
	yaml := "type: service\nname: pd\nport: 8000\nreplicas:\n" +
		"  - name: router\n    count: 1\n    router: {type: sglang}\n" + res + "    commands:\n" + scriptCommand(routerHandler) +
		"  - name: prefill\n    count: 1\n    env: [MODE=prefill]\n" + res + "    commands:\n" + scriptCommand(workerHandler) +
		"  - name: decode\n    count: 1\n    env: [MODE=decode]\n" + res + "    commands:\n" + scriptCommand(workerHandler)
	var plan api.RunPlan
	c.must(http.StatusOK, c.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(yaml), &plan)
	c.submit(yaml)
	c.waitRun("pd", "running", "", 90*time.Second)

	ip := map[string]string{}
	testutil.Eventually(t, 60*time.Second, func() error {
		for _, j := range c.run(t, "pd").Jobs {
			if j.Instance == "" {
				return fmt.Errorf("replica %s has no host yet", j.Name)
			}
			ip[j.Group] = c.hostOf(t, j.Instance).IP
		}
		if len(ip) != 3 {
			return fmt.Errorf("replicas by group: %v", ip)
		}
		return nil
	})
	prefill := `REGISTER {"url":"http://` + ip["prefill"] + `:8000","worker_type":"prefill","bootstrap_port":8998,"connection_mode":"http","runtime_type":"sglang"}`
	decode := `REGISTER {"url":"http://` + ip["decode"] + `:8000","worker_type":"decode","connection_mode":"http","runtime_type":"sglang"}`
	testutil.Eventually(t, 60*time.Second, func() error {
		logs := strings.Join(c.runLogs("pd"), "\n")
		if !strings.Contains(logs, prefill) || !strings.Contains(logs, decode) {
			return fmt.Errorf("the router has not both registrations, want\n%s\n%s\nlogs:\n%s", prefill, decode, logs)
		}
		return nil
	})

	// Through the gateway: every request reaches the router (the only
	// replica the gateway has), which forwards it to both workers.
	want := "router forwarded: [worker decode path=/hello] [worker prefill path=/hello]"
	for i := range 6 {
		var body string
		testutil.Eventually(t, 30*time.Second, func() error {
			var code int
			code, body = c.proxyGet("/proxy/services/main/pd/hello", "Bearer "+c.admin)
			if code != http.StatusOK {
				return fmt.Errorf("%d %s", code, body)
			}
			return nil
		})
		if !strings.HasPrefix(body, "router forwarded:") {
			t.Fatalf("request %d reached a worker, not the router: %q", i, body)
		}
		if got := sortedForward(body); got != want {
			t.Fatalf("request %d: %q, want %q", i, got, want)
		}
	}
	svc, ok := c.gwResolver.Service("main", "pd")
	if !ok || len(svc.Replicas) != 1 || svc.MinReplicas != 1 {
		t.Fatalf("the gateway's replicas: ok=%v %+v", ok, svc)
	}

	// The decode worker ends: the server removes it from the router.
	if code, body := c.proxyGet("/proxy/services/main/pd/quit", "Bearer "+c.admin); code != http.StatusOK {
		t.Fatalf("quit: %d %s", code, body)
	}
	testutil.Eventually(t, 60*time.Second, func() error {
		logs := strings.Join(c.runLogs("pd"), "\n")
		if !strings.Contains(logs, "DEREGISTER http://"+ip["decode"]+":8000") {
			return fmt.Errorf("the decode worker was not removed; logs:\n%s", logs)
		}
		return nil
	})
	if logs := strings.Join(c.runLogs("pd"), "\n"); strings.Contains(logs, "DEREGISTER http://"+ip["prefill"]) {
		t.Fatalf("the prefill worker, still running, was removed:\n%s", logs)
	}
	_, body := c.proxyGet("/proxy/services/main/pd/again", "Bearer "+c.admin)
	if body != "router forwarded: [worker prefill path=/again]" {
		t.Fatalf("after the decode worker ended: %q", body)
	}
}

// sortedForward orders the router's forwarded answers, so the test does
// not depend on the order of its registrations.
func sortedForward(body string) string {
	rest := strings.TrimPrefix(body, "router forwarded:")
	parts := strings.SplitAfter(rest, "]")
	var items []string
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			items = append(items, p)
		}
	}
	for i := range items {
		for j := i + 1; j < len(items); j++ {
			if items[j] < items[i] {
				items[i], items[j] = items[j], items[i]
			}
		}
	}
	return "router forwarded: " + strings.Join(items, " ")
}

// TestDynamoWorkersGetTheRouterAddress: with a Dynamo router group, each
// worker replica gets DSTACK_ROUTER_INTERNAL_IP, the address of the
// router replica's host (as dstack gives it), and the router itself does
// not; only the router's replica is the gateway's.
func TestDynamoWorkersGetTheRouterAddress(t *testing.T) {
	ts := startServer(t, "")
	ts.submit(`type: service
name: dyn
port: 8000
replicas:
  - name: frontend
    count: 1
    router: {type: dynamo}
    commands: ['echo "frontend router=[$DSTACK_ROUTER_INTERNAL_IP]"', sleep 300]
    resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
  - name: workers
    count: 2
    commands: ['echo "worker router=[$DSTACK_ROUTER_INTERNAL_IP]"', sleep 300]
    resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
`)
	ts.waitRun("dyn", "running", "", 60*time.Second)
	var router api.Job
	for _, j := range ts.getRun("dyn").Jobs {
		if j.Group == "frontend" {
			router = j
		}
	}
	if router.Instance == "" {
		t.Fatalf("the router replica has no host: %+v", router)
	}
	addr, err := ts.dispatcher.instanceAddress(context.Background(), router.Instance)
	if err != nil || addr == "" {
		t.Fatalf("the router's address: %q %v", addr, err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		out := strings.Join(lineTexts(ts.getLogs("dyn", "")), "\n")
		if strings.Count(out, "worker router=["+addr+"]") != 2 || strings.Count(out, "frontend router=[]") != 1 {
			return fmt.Errorf("want two workers with router=[%s] and a frontend without, got:\n%s", addr, out)
		}
		return nil
	})
	svc, ok := ts.gwResolver.Service("main", "dyn")
	if !ok || len(svc.Replicas) != 1 || svc.Replicas[0].ID != router.ID || svc.MinReplicas != 1 {
		t.Fatalf("the gateway's replicas are not the router's only: ok=%v %+v", ok, svc)
	}
}

// TestRouterSyncAddsWhatTheRouterLacksAndRemovesTheRest: against a router
// (real HTTP) that lists a stale worker and one of the targets, a sync
// posts the missing target with dstack's body and deletes the stale one
// by its id, leaving the listed target alone; a router whose answer
// exceeds dstack's bound, or that redirects, is not believed.
func TestRouterSyncAddsWhatTheRouterLacksAndRemovesTheRest(t *testing.T) {
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls = append(calls, r.Method+" "+r.URL.Path+" "+string(b))
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/workers":
			fmt.Fprint(w, `{"workers": [{"id": "old", "url": "http://10.0.0.9:8000"}, {"id": "keep", "url": "http://10.0.0.1:8000/"}]}`)
		case r.URL.Path == "/big":
			fmt.Fprint(w, `{"workers": [`+strings.Repeat(" ", maxRouterListBytes)+`]}`)
		case r.URL.Path == "/moved":
			http.Redirect(w, r, "/workers", http.StatusFound)
		default:
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprint(w, `{"status": "accepted"}`)
		}
	}))
	defer srv.Close()
	s := &Server{log: zerolog.Nop()}
	rc := s.replicaClient(store.Record{}, 8000) // its redirect rule; dialed here to srv
	rc.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}}
	ctx := context.Background()
	current, err := routerWorkers(ctx, rc)
	if err != nil || len(current) != 2 {
		t.Fatalf("the router's list: %v %v", current, err)
	}
	boot := 8998
	targets := []routerTarget{
		{URL: "http://10.0.0.1:8000", WorkerType: "decode", ConnectionMode: "http", RuntimeType: "sglang"},
		{URL: "http://10.0.0.2:8000", WorkerType: "prefill", BootstrapPort: &boot, ConnectionMode: "http", RuntimeType: "sglang"},
	}
	calls = nil
	if err := s.reconcileRouter(ctx, serviceView{}, rc, current, targets); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`POST /workers {"url":"http://10.0.0.2:8000","worker_type":"prefill","bootstrap_port":8998,"connection_mode":"http","runtime_type":"sglang"}`,
		`DELETE /workers/old `,
	}
	if strings.Join(calls, "\n") != strings.Join(want, "\n") {
		t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	var list struct{}
	if err := routerCall(ctx, rc, http.MethodGet, "/big", nil, http.StatusOK, maxRouterListBytes, &list); err == nil {
		t.Fatal("an answer past the bound was read")
	}
	if err := routerCall(ctx, rc, http.MethodGet, "/moved", nil, http.StatusOK, maxRouterListBytes, &list); err == nil {
		t.Fatal("a redirect was followed")
	}
}
