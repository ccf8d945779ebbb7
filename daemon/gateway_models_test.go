package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// modelServeArg makes the test binary a model server (TestMain):
// modelServe(addr, name).
const modelServeArg = "gpud-test-model-serve"

// modelServe is a stand-in model server named name on addr. A POST
// answers with JSON saying who served which model at which path with
// which Authorization; with "stream": true it sends one SSE chunk at
// once and holds the second until GET /release. GET /health passes until
// GET /break, and GET /hits says how many health checks it answered.
func modelServe(addr, name string) int {
	release := make(chan struct{})
	var once sync.Once
	var health struct {
		sync.Mutex
		hits   int
		broken bool
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /release", func(http.ResponseWriter, *http.Request) { once.Do(func() { close(release) }) })
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		health.Lock()
		defer health.Unlock()
		health.hits++
		if health.broken {
			http.Error(w, "broken", http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /break", func(http.ResponseWriter, *http.Request) {
		health.Lock()
		health.broken = true
		health.Unlock()
	})
	mux.HandleFunc("GET /hits", func(w http.ResponseWriter, _ *http.Request) {
		health.Lock()
		defer health.Unlock()
		fmt.Fprint(w, health.hits)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"served_by":%q,"model":%q,"path":%q,"authorization":%q}`, name, req.Model, r.URL.Path, r.Header.Get("Authorization"))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"served_by\":%q,\"chunk\":1}\n\n", name)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, "data: {\"served_by\":%q,\"chunk\":2}\n\ndata: [DONE]\n\n", name)
	})
	err := http.ListenAndServe(addr, mux)
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// modelServiceConfig is a service that serves model with modelServe.
func modelServiceConfig(bin, name, model string, port int, extra string) string {
	return fmt.Sprintf(`type: service
name: %[1]s
port: %[2]d
commands:
  - exec %[4]s %[5]s 127.0.0.1:%[2]d %[1]s
model: %[6]s
resources: {cpu: 0.., memory: 1MB.., disk: 1GB..}
%[3]s`, name, port, extra, bin, modelServeArg, model)
}

// modelPost sends body to the project's model route with token; it
// returns the response, whose body the caller closes.
func (ts *testServer) modelPost(project, route, token, body string) *http.Response {
	ts.t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.URL()+"/proxy/models/"+project+"/"+route, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestModelRoutesRouteByModelNameThroughTheGateway: two services that
// declare models are listed on the project's OpenAI-compatible endpoint
// and each request reaches the service its "model" names, streams
// included (the first chunk arrives while the replica still holds the
// second); an unknown model is a 404 naming the known ones; the endpoint
// is the project's members' only (an auth: false service included), and
// their token never reaches the model server.
func TestModelRoutesRouteByModelNameThroughTheGateway(t *testing.T) {
	ts := startServer(t, "")
	bin := echoBinary(t)
	llamaPort, qwenPort := freeLoopbackPort(t), freeLoopbackPort(t)
	llama := modelServiceConfig(bin, "llama", "meta/llama", llamaPort, "")
	qwen := modelServiceConfig(bin, "qwen", "qwen/qwen", qwenPort, "auth: false\n")

	var plan api.RunPlan
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(llama), &plan)
	if !strings.Contains(strings.Join(plan.Notes, "\n"), "/proxy/models/main/v1/") {
		t.Errorf("the plan does not say where the model is served: %q", plan.Notes)
	}
	ts.submit(llama)
	ts.submit(qwen)
	ts.waitRun("llama", "running", "", 60*time.Second)
	ts.waitRun("qwen", "running", "", 60*time.Second)

	// Routed by name, each to its own service, without the caller's token.
	for _, tc := range []struct{ route, model, servedBy string }{
		{"v1/chat/completions", "meta/llama", "llama"},
		{"v1/chat/completions", "qwen/qwen", "qwen"},
		{"chat/completions", "qwen/qwen", "qwen"}, // dstack's base URL has no /v1
		{"v1/completions", "meta/llama", "llama"},
	} {
		var got struct {
			ServedBy      string `json:"served_by"`
			Model         string `json:"model"`
			Path          string `json:"path"`
			Authorization string `json:"authorization"`
		}
		testutil.Eventually(t, 30*time.Second, func() error {
			resp := ts.modelPost("main", tc.route, ts.admin, `{"model":"`+tc.model+`","messages":[{"role":"user","content":"hi"}]}`)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s %s: %d %s", tc.route, tc.model, resp.StatusCode, body)
			}
			return json.Unmarshal([]byte(body), &got)
		})
		wantPath := "/v1/" + strings.TrimPrefix(tc.route, "v1/")
		if got.ServedBy != tc.servedBy || got.Model != tc.model || got.Path != wantPath {
			t.Errorf("%s %s: served by %s at %s, want %s at %s", tc.route, tc.model, got.ServedBy, got.Path, tc.servedBy, wantPath)
		}
		if got.Authorization != "" {
			t.Errorf("%s %s: the model server saw the caller's token %q", tc.route, tc.model, got.Authorization)
		}
	}

	// The list, in OpenAI's shape.
	var list struct {
		Object string
		Data   []struct{ ID, Object, OwnedBy string }
	}
	ts.must(http.StatusOK, ts.admin, "GET", "/proxy/models/main/v1/models", nil, &list)
	if list.Object != "list" || len(list.Data) != 2 || list.Data[0].ID != "meta/llama" || list.Data[1].ID != "qwen/qwen" || list.Data[0].Object != "model" {
		t.Errorf("v1/models: %+v, want meta/llama and qwen/qwen", list)
	}

	// An unknown model: 404 naming the known ones.
	resp := ts.modelPost("main", "v1/chat/completions", ts.admin, `{"model":"gpt-9"}`)
	if body := readAll(t, resp); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "gpt-9") || !strings.Contains(body, "meta/llama") || !strings.Contains(body, "qwen/qwen") {
		t.Errorf("an unknown model: %d %s, want 404 naming it and the known models", resp.StatusCode, body)
	}

	// Only the project's members: no token, or another project's member,
	// learns nothing, even of the auth: false service's model.
	stranger := ts.user("stranger")
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "elsewhere"}, nil)
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/elsewhere/members/stranger", api.SetMemberRequest{Role: api.RoleAdmin}, nil)
	for _, tok := range []string{"", stranger} {
		resp := ts.modelPost("main", "v1/chat/completions", tok, `{"model":"qwen/qwen"}`)
		if body := readAll(t, resp); resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusNotFound || strings.Contains(body, "served_by") {
			t.Errorf("a caller outside the project (with a token: %v): %d %s, want 401 or 404", tok != "", resp.StatusCode, body)
		}
		if status, _ := ts.call(tok, "GET", "/proxy/models/main/v1/models", nil, nil); status != http.StatusUnauthorized && status != http.StatusNotFound {
			t.Errorf("the model list for a caller outside the project: %d", status)
		}
	}
	// The stranger's own project lists none of main's models.
	var theirs struct{ Data []struct{ ID string } }
	ts.must(http.StatusOK, stranger, "GET", "/proxy/models/elsewhere/v1/models", nil, &theirs)
	if len(theirs.Data) != 0 {
		t.Errorf("another project lists main's models: %+v", theirs)
	}

	// Streaming: the first chunk arrives while the replica holds the
	// second, which follows once released.
	resp = ts.modelPost("main", "v1/chat/completions", ts.admin, `{"model":"meta/llama","stream":true,"messages":[]}`)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("a streamed request: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewReader(resp.Body)
	first, err := lines.ReadString('\n')
	if err != nil || !strings.Contains(first, `"chunk":1`) || !strings.Contains(first, "llama") {
		t.Fatalf("first line %q (%v), want llama's first chunk before the replica ends", first, err)
	}
	rel, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/release", llamaPort))
	if err != nil {
		t.Fatal(err)
	}
	rel.Body.Close()
	rest, err := io.ReadAll(lines)
	if err != nil || !strings.Contains(string(rest), `"chunk":2`) || !strings.Contains(string(rest), "[DONE]") {
		t.Errorf("the rest of the stream %q (%v), want the second chunk and [DONE]", rest, err)
	}
}

// TestModelFormatTGIIsRefusedByName: format tgi asked dstack's gateway to
// translate OpenAI requests; gpud's plan refuses it, naming the field and
// format openai instead.
func TestModelFormatTGIIsRefusedByName(t *testing.T) {
	ts := startServer(t, "")
	cfg := "type: service\nport: 8000\ncommands: [true]\nmodel:\n  name: m\n  format: tgi\n"
	status, se := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(cfg), nil)
	if status != http.StatusUnprocessableEntity || se.Code != api.CodeNotHonoured || !strings.Contains(strings.Join(se.Errors, "\n"), "format openai") ||
		!strings.Contains(strings.Join(se.Errors, "\n"), "test.yml:4:") {
		t.Errorf("plan of a tgi model: %d %s %q, want 422 naming model at line 4 with format openai instead", status, se.Code, se.Errors)
	}
}

// TestModelEndpointIsServedAtGatewayDotDomain: as dstack's gateway, the
// server serves a project's model endpoint at gateway.<domain> over HTTPS
// (the default project at the server's domain, a project's gateway at
// its own), with a certificate for that host only, and the same token
// checks as /proxy/models/.
func TestModelEndpointIsServedAtGatewayDotDomain(t *testing.T) {
	ts := startServerWith(t, Options{Runtime: "process", Domain: "gpud.test", GatewayTLS: GatewayTLSInternal,
		HTTPSListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"})
	if status, se, _ := applyGateway(ts, "main", "type: gateway\nname: g\ndomain: models.example\n"); status != http.StatusOK {
		t.Fatalf("apply the gateway: %d %s", status, se.Error())
	}
	port := freeLoopbackPort(t)
	ts.submit(modelServiceConfig(echoBinary(t), "llama", "meta/llama", port, "gateway: false\n"))
	ts.waitRun("llama", "running", "", 60*time.Second)
	cl := gatewayClient(t, ts.GatewayCACertPEM(), ts.GatewayHTTPSAddr())
	do := func(method, url, token, body string) (int, string) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, readAll(t, resp)
	}
	for _, host := range []string{"gateway.gpud.test", "gateway.models.example"} {
		testutil.Eventually(t, 30*time.Second, func() error {
			status, body := do("POST", "https://"+host+"/v1/chat/completions", ts.admin, `{"model":"meta/llama"}`)
			if status != http.StatusOK || !strings.Contains(body, `"served_by":"llama"`) {
				return fmt.Errorf("%s: %d %s", host, status, body)
			}
			return nil
		})
		// dstack's base URL is the host itself: /chat/completions, /models.
		if status, body := do("GET", "https://"+host+"/models", ts.admin, ""); status != http.StatusOK || !strings.Contains(body, `"id":"meta/llama"`) {
			t.Errorf("%s/models: %d %s", host, status, body)
		}
		if status, body := do("POST", "https://"+host+"/chat/completions", "", `{"model":"meta/llama"}`); status != http.StatusUnauthorized || strings.Contains(body, "served_by") {
			t.Errorf("%s without a token: %d %s, want 401", host, status, body)
		}
	}
	// Another project's name under the server's domain: no such project,
	// no certificate; nor for a label other than gateway.
	noCertificateFor(t, ts.GatewayHTTPSAddr(), "gateway.nosuchproject.gpud.test")
	noCertificateFor(t, ts.GatewayHTTPSAddr(), "models.models.example")
}
