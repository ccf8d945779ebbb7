package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
)

// modelsResolver is a Resolver over fixed services whose members hold the
// token "member".
type modelsResolver struct {
	svcs []*Service
}

func (f *modelsResolver) ServiceByHost(string) (*Service, bool) { return nil, false }
func (f *modelsResolver) Service(project, run string) (*Service, bool) {
	for _, s := range f.svcs {
		if s.Project == project && s.Run == run {
			return s, true
		}
	}
	return nil, false
}
func (f *modelsResolver) Models(project string) []*Service {
	var out []*Service
	for _, s := range f.svcs {
		if s.Project == project && s.Model != nil {
			out = append(out, s)
		}
	}
	return out
}
func (f *modelsResolver) Authorize(r *http.Request, svc *Service) error {
	if r.Header.Get("Authorization") == "Bearer member-of-"+svc.Project {
		return nil
	}
	return errors.New("not a member")
}
func (f *modelsResolver) WaitReplica(ctx context.Context, svc *Service) (*Service, error) {
	return nil, errors.New("no scale from zero here")
}

// directForwarder forwards to the first replica's Addr, flushing at once,
// without the caller's token: the smallest Forwarder, standing in for the
// Gateway.
type directForwarder struct{}

func (directForwarder) Forward(w http.ResponseWriter, r *http.Request, svc *Service) {
	r.Header.Del("Authorization")
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: svc.Replicas[0].Addr})
			pr.Out.URL.Path = r.URL.Path
		},
		FlushInterval: -1,
	}
	rp.ServeHTTP(w, r)
}

// modelServer is a replica that says which model it serves, the path it
// was asked for and the Authorization it saw, and streams two SSE chunks
// with the second held until release is closed.
func modelServer(t testing.TB, name string, release chan struct{}) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	}))
	t.Cleanup(srv.Close)
	return srv
}

func modelService(run, model, prefix string, srv *httptest.Server) *Service {
	return &Service{Project: "main", Run: run, Auth: true,
		Model:    &api.Model{Type: "chat", Name: model, Format: "openai", Prefix: prefix},
		Replicas: []Replica{{ID: run + "-0", Addr: strings.TrimPrefix(srv.URL, "http://")}}}
}

func newModelsEndpoint(t *testing.T, svcs ...*Service) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/proxy/models/{project}/{path...}", NewModels(&modelsResolver{svcs: svcs}, directForwarder{}))
	return serveFront(t, mux)
}

func post(t *testing.T, url, token, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestModelRoutesSendEachRequestToTheServiceOfItsModel(t *testing.T) {
	never := make(chan struct{})
	llama := modelServer(t, "llama-svc", never)
	qwen := modelServer(t, "qwen-svc", never)
	ep := newModelsEndpoint(t,
		modelService("llama", "meta/llama", "", llama),
		modelService("qwen", "qwen/qwen", "/openai/v1", qwen),
		modelService("root", "root/model", "/", modelServer(t, "root-svc", never)))
	base := ep.URL + "/proxy/models/main"

	for _, tc := range []struct {
		path, model, servedBy, replicaPath string
	}{
		{"/v1/chat/completions", "meta/llama", "llama-svc", "/v1/chat/completions"},
		{"/v1/chat/completions", "qwen/qwen", "qwen-svc", "/openai/v1/chat/completions"},
		{"/chat/completions", "qwen/qwen", "qwen-svc", "/openai/v1/chat/completions"}, // dstack's base URL, without /v1
		{"/v1/completions", "meta/llama", "llama-svc", "/v1/completions"},
		{"/v1/embeddings", "qwen/qwen", "qwen-svc", "/openai/v1/embeddings"},
		{"/v1/chat/completions", "root/model", "root-svc", "/chat/completions"}, // prefix: /
	} {
		resp, body := post(t, base+tc.path, "member-of-main", `{"model":"`+tc.model+`","messages":[]}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", tc.path, tc.model, resp.StatusCode, body)
		}
		var got struct {
			ServedBy      string `json:"served_by"`
			Model         string `json:"model"`
			Path          string `json:"path"`
			Authorization string `json:"authorization"`
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("%s: %v: %s", tc.path, err, body)
		}
		if got.ServedBy != tc.servedBy || got.Model != tc.model || got.Path != tc.replicaPath {
			t.Errorf("%s model %s: served by %s at %s, want %s at %s", tc.path, tc.model, got.ServedBy, got.Path, tc.servedBy, tc.replicaPath)
		}
		if got.Authorization != "" {
			t.Errorf("%s: the replica saw the caller's token %q", tc.path, got.Authorization)
		}
	}
}

func TestModelRoutesListTheProjectsModelsInOpenAIsShape(t *testing.T) {
	never := make(chan struct{})
	ep := newModelsEndpoint(t,
		modelService("qwen", "qwen/qwen", "", modelServer(t, "q", never)),
		modelService("llama", "meta/llama", "", modelServer(t, "l", never)),
		&Service{Project: "other", Run: "secret", Model: &api.Model{Name: "other/secret"}})
	for _, path := range []string{"/proxy/models/main/v1/models", "/proxy/models/main/models"} {
		req, err := http.NewRequest(http.MethodGet, ep.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer member-of-main")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Object string
			Data   []modelEntry
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, err)
		}
		want := []modelEntry{{ID: "meta/llama", Object: "model", OwnedBy: "main"}, {ID: "qwen/qwen", Object: "model", OwnedBy: "main"}}
		if list.Object != "list" || fmt.Sprint(list.Data) != fmt.Sprint(want) {
			t.Errorf("%s: %+v, want object list with %+v", path, list, want)
		}
	}
}

func TestModelRoutesStreamEachChunkAsTheReplicaSendsIt(t *testing.T) {
	release := make(chan struct{})
	ep := newModelsEndpoint(t, modelService("llama", "meta/llama", "", modelServer(t, "llama-svc", release)))
	req, err := http.NewRequest(http.MethodPost, ep.URL+"/proxy/models/main/v1/chat/completions",
		strings.NewReader(`{"model":"meta/llama","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer member-of-main")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	first, err := lines.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	// The replica holds its second chunk until release: the first one
	// arrived while the replica was still answering.
	if !strings.Contains(first, `"chunk":1`) {
		t.Fatalf("first line %q, want the first chunk", first)
	}
	close(release)
	rest, err := io.ReadAll(lines)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rest), `"chunk":2`) || !strings.Contains(string(rest), "[DONE]") {
		t.Errorf("rest of the stream %q lacks the second chunk and [DONE]", rest)
	}
}

func TestModelRoutesRefuseBadRequestsByName(t *testing.T) {
	never := make(chan struct{})
	tgi := modelService("tgi", "old/tgi", "", modelServer(t, "t", never))
	tgi.Model.Format = "tgi"
	ep := newModelsEndpoint(t,
		modelService("llama", "meta/llama", "", modelServer(t, "l", never)), tgi)
	chat := ep.URL + "/proxy/models/main/v1/chat/completions"
	for _, tc := range []struct {
		name, url, token, body string
		status                 int
		says                   []string
	}{
		{"unknown model", chat, "member-of-main", `{"model":"gpt-9"}`, 404, []string{`\"gpt-9\"`, `\"meta/llama\"`, "model_not_found"}},
		{"bad JSON", chat, "member-of-main", `{"model":`, 400, []string{"not a JSON object"}},
		{"model not a string", chat, "member-of-main", `{"model":7}`, 400, []string{"not a JSON object"}},
		{"no model", chat, "member-of-main", `{"messages":[]}`, 400, []string{`names no \"model\"`, `\"meta/llama\"`}},
		{"no token", chat, "", `{"model":"meta/llama"}`, 401, []string{"project member"}},
		{"another project's token", chat, "member-of-other", `{"model":"meta/llama"}`, 401, []string{"project member"}},
		{"a stranger probing for models", chat, "", `{"model":"gpt-9"}`, 401, []string{"project member"}},
		{"a stranger without a model", chat, "", `{}`, 401, []string{"project member"}},
		{"tgi format", chat, "member-of-main", `{"model":"old/tgi"}`, 501, []string{"format openai", "TGI"}},
		{"unknown route", ep.URL + "/proxy/models/main/v1/images", "member-of-main", `{}`, 404, []string{"v1/chat/completions"}},
		{"too big", chat, "member-of-main", `{"model":"meta/llama","pad":"` + strings.Repeat("x", MaxModelRequestBytes) + `"}`, 413, []string{"over"}},
	} {
		resp, body := post(t, tc.url, tc.token, tc.body)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, body, tc.status)
			continue
		}
		for _, s := range tc.says {
			if !strings.Contains(body, s) {
				t.Errorf("%s: %s does not say %s", tc.name, body, s)
			}
		}
		if tc.status == 401 && strings.Contains(body, "llama") {
			t.Errorf("%s: a refused caller learnt a model name: %s", tc.name, body)
		}
	}
	resp, err := http.Get(ep.URL + "/proxy/models/main/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 401 || strings.Contains(string(b), "llama") {
		t.Errorf("the list without a token: %d %s, want 401 naming no model", resp.StatusCode, b)
	}
	resp, err = http.Get(ep.URL + "/proxy/models/empty/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("a project without models, without a token: %d, want 401 as for any project", resp.StatusCode)
	}
}

// FuzzModelRoutes sends arbitrary routes and bodies to the model routes:
// they never panic, and answer a member 200 only for a known model on a
// known route, else one of the statuses they document.
func FuzzModelRoutes(f *testing.F) {
	f.Add("v1/chat/completions", []byte(`{"model":"meta/llama"}`))
	f.Add("chat/completions", []byte(`{"model":7}`))
	f.Add("v1/models", []byte(``))
	f.Add("v1/embeddings", []byte(`[{"model":"x"}]`))
	f.Add("v1/completions", []byte("{\"model\":\"meta/llama\",\"model\":\"\x00\"}"))
	never := make(chan struct{})
	srv := modelServer(f, "llama", never)
	m := NewModels(&modelsResolver{svcs: []*Service{modelService("llama", "meta/llama", "", srv)}}, directForwarder{})
	f.Fuzz(func(t *testing.T, route string, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer member-of-main")
		rec := httptest.NewRecorder()
		m.Serve(rec, req, "main", route)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("route %q body %q: status %d %s", route, body, rec.Code, rec.Body)
		}
		if rec.Code == http.StatusOK && !strings.Contains(rec.Body.String(), `"served_by":"llama"`) {
			t.Fatalf("route %q body %q: 200 not from the replica: %s", route, body, rec.Body)
		}
	})
}

// answerForwarder answers every forwarded request itself: it isolates
// what the model routes add (reading the body, finding the model).
type answerForwarder struct{}

func (answerForwarder) Forward(w http.ResponseWriter, r *http.Request, _ *Service) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// BenchmarkModelRouting is the model routes' own cost per chat request
// (a 1 KiB body, among 50 models), without the network or the replica.
func BenchmarkModelRouting(b *testing.B) {
	var svcs []*Service
	for i := range 50 {
		svcs = append(svcs, &Service{Project: "main", Run: fmt.Sprintf("svc%02d", i), Model: &api.Model{Name: fmt.Sprintf("org/model-%02d", i), Format: "openai"}})
	}
	m := NewModels(&modelsResolver{svcs: svcs}, answerForwarder{})
	body := `{"model":"org/model-42","messages":[{"role":"user","content":"` + strings.Repeat("x", 1000) + `"}]}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/proxy/models/main/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer member-of-main")
		rec := httptest.NewRecorder()
		m.Serve(rec, req, "main", "v1/chat/completions")
		if rec.Code != http.StatusOK {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}
