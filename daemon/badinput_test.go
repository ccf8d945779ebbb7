package daemon

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
)

// TestBadInputIsRefusedAndNothingStored sends malformed, unknown, huge
// and mistyped bodies: each gets a clear 4xx naming the problem, and the
// store holds no new run, queue or secret.
func TestBadInputIsRefusedAndNothingStored(t *testing.T) {
	ts := startServer(t, "")
	p := "/api/v1/projects/main"
	runsBefore, queuesBefore := ts.store.Runs().Count(), ts.store.Queues().Count()
	tests := []struct {
		name, method, path string
		body               []byte
		status             int
		code, field        string
	}{
		{"malformed JSON", "POST", p + "/runs/apply", []byte(`{"configuration_yaml": `), 400, api.CodeInvalidJSON, ""},
		{"not JSON at all", "POST", p + "/runs/apply", []byte(`type: task`), 400, api.CodeInvalidJSON, ""},
		{"empty body", "POST", p + "/runs/apply", []byte(``), 400, api.CodeInvalidJSON, ""},
		{"unknown field", "POST", p + "/runs/apply", []byte(`{"configuration_yaml":"type: task\ncommands: [echo]\n","colour":1}`), 400, api.CodeUnknownField, "colour"},
		{"wrong type", "POST", p + "/runs/apply", []byte(`{"configuration_yaml": 42}`), 400, api.CodeInvalidField, "configuration_yaml"},
		{"two values", "POST", p + "/runs/apply", []byte(`{} {}`), 400, api.CodeInvalidJSON, ""},
		{"huge body", "POST", p + "/runs/apply", []byte(`{"configuration_yaml":"` + strings.Repeat("a", api.MaxRequestBody+10) + `"}`), 413, api.CodeBodyTooLarge, ""},
		{"no configuration", "POST", p + "/runs/apply", []byte(`{}`), 400, api.CodeInvalidField, "configuration"},
		{"invalid configuration", "POST", p + "/runs/apply", []byte(`{"configuration_yaml":"type: task\nresources: {gpu: \"H100:x\"}\n"}`), 400, api.CodeInvalidConfiguration, "configuration.resources.gpu"},
		{"queue that does not exist", "POST", p + "/runs/apply", []byte(`{"configuration_yaml":"type: task\nqueue: nope\ncommands: [echo]\n"}`), 400, api.CodeInvalidField, "configuration.queue"},
		{"run config to the queue endpoint", "POST", p + "/queues/apply", []byte(`{"configuration_yaml":"type: task\ncommands: [echo]\n"}`), 400, api.CodeInvalidField, "configuration.type"},
		{"secret with wrong type", "PUT", p + "/secrets/S", []byte(`{"value": true}`), 400, api.CodeInvalidField, "value"},
		{"secret with a bad name", "PUT", p + "/secrets/bad-name", []byte(`{"value": "x"}`), 400, api.CodeInvalidField, "name"},
		{"unknown secret reference", "POST", p + "/runs/apply", []byte(`{"configuration_yaml":"type: task\ncommands: [echo]\nenv: [\"T=${{ secrets.NOPE }}\"]\n"}`), 400, api.CodeInvalidField, "configuration.env.T"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.URL()+tt.path, bytes.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer "+ts.admin)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var se api.ServerError
			_ = decodeStrict(resp.Body, &se)
			if resp.StatusCode != tt.status || se.Code != tt.code || (tt.field != "" && se.Field != tt.field) || se.Message == "" {
				t.Fatalf("status %d %+v, want %d %s field %q", resp.StatusCode, se, tt.status, tt.code, tt.field)
			}
		})
	}
	if ts.store.Runs().Count() != runsBefore || ts.store.Queues().Count() != queuesBefore || ts.store.Secrets().Count() != 0 {
		t.Fatalf("bad input stored something: runs %d->%d queues %d->%d secrets %d", runsBefore, ts.store.Runs().Count(), queuesBefore, ts.store.Queues().Count(), ts.store.Secrets().Count())
	}
}

// FuzzDecodeRequest feeds arbitrary bytes to the API's strict decoder: it
// must never panic, and whatever it refuses is an API error with a code.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{`{}`, `{"configuration_yaml":"type: task"}`, `{"env":{"A":"b"},"force":true}`, `[`, `{"name":1}`, `{"configuration":{"type":"task"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req api.ApplyRunRequest
		err := decodeStrict(bytes.NewReader(data), &req)
		if err == nil {
			return
		}
		se, ok := err.(*api.ServerError)
		if !ok || se.Code == "" || se.Status < 400 || se.Status > 499 {
			t.Fatalf("decode %q: %T %v, want a 4xx API error", data, err, err)
		}
	})
}
