package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// These tests drive the client against real HTTP servers that misbehave
// on purpose (error bodies, outages, broken streams): the conditions the
// client must handle and the daemon cannot be made to produce on demand.
// The daemon's own answers are covered by the e2e tests of the cli package and internal/e2e.

func fastClient(t *testing.T, url, token string) *Client {
	t.Helper()
	c, err := NewClient(url, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.retry = Backoff{Attempts: 4, First: time.Millisecond, Max: 5 * time.Millisecond}
	return c
}

func TestClientDecodesErrorAnswers(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		body       string
		wantCode   string
		wantField  string
		wantInText string
	}{
		{"API error with field", 400, `{"code":"invalid_field","message":"must be a size","field":"resources.memory"}`,
			CodeInvalidField, "resources.memory", "must be a size"},
		{"not found", 404, `{"code":"not_found","message":"run \"x\" not found"}`, CodeNotFound, "", `run "x" not found`},
		{"a proxy's HTML page keeps status and text", 502, `<html>bad gateway</html>`, "http_502", "", "<html>bad gateway</html>"},
		{"an empty body says the status", 401, ``, "http_401", "", "Unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.body)
			}))
			defer srv.Close()
			c := fastClient(t, srv.URL, "tok")
			_, err := c.GetRun(context.Background(), "main", "x")
			var se *ServerError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v (%T), want a *ServerError", err, err)
			}
			if se.Status != tt.status || se.Code != tt.wantCode || se.Field != tt.wantField || !strings.Contains(se.Error(), tt.wantInText) {
				t.Fatalf("got %+v (%q), want status %d code %q field %q text containing %q", se, se.Error(), tt.status, tt.wantCode, tt.wantField, tt.wantInText)
			}
			if !IsStatus(err, tt.status) {
				t.Fatalf("IsStatus(err, %d) = false", tt.status)
			}
		})
	}
}

func TestClientSendsBearerTokenAndEscapesNames(t *testing.T) {
	var gotAuth, gotPath string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotPath = r.Header.Get("Authorization"), r.URL.EscapedPath()
		_ = json.NewEncoder(w).Encode(Run{Name: "a b", Status: "running"})
	}))
	defer srv.Close()
	run, err := fastClient(t, srv.URL+"/", "s3cret").GetRun(context.Background(), "my proj", "a b")
	if err != nil {
		t.Fatal(err)
	}
	if gotAuth != "Bearer s3cret" || gotPath != "/api/v1/projects/my%20proj/runs/a%20b" || run.Status != "running" {
		t.Fatalf("auth %q path %q run %+v", gotAuth, gotPath, run)
	}
}

func TestRetryOnlyForIdempotentCallsAndPassingFailures(t *testing.T) {
	tests := []struct {
		name      string
		call      func(*Client) error
		status    int
		wantTries int32
	}{
		{"GET retried on 503 until it works", func(c *Client) error { _, err := c.ListRuns(context.Background(), "main", false); return err }, 503, 3},
		{"GET not retried on 404", func(c *Client) error { _, err := c.ListRuns(context.Background(), "main", false); return err }, 404, 1},
		{"apply (POST) sent once even on 503", func(c *Client) error {
			_, err := c.ApplyRun(context.Background(), "main", ApplyRunRequest{})
			return err
		}, 503, 1},
		{"stop retried on 503", func(c *Client) error { _, err := c.StopRun(context.Background(), "main", "r", false); return err }, 503, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tries atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tries.Add(1) < 3 {
					w.WriteHeader(tt.status)
					fmt.Fprint(w, `{"code":"x","message":"not now"}`)
					return
				}
				if r.Method == http.MethodGet {
					fmt.Fprint(w, `[]`)
					return
				}
				fmt.Fprint(w, `{}`)
			}))
			defer srv.Close()
			err := tt.call(fastClient(t, srv.URL, ""))
			if tries.Load() != tt.wantTries {
				t.Fatalf("tries = %d, want %d (err %v)", tries.Load(), tt.wantTries, err)
			}
			if tt.wantTries == 3 && err != nil {
				t.Fatalf("err = %v after the server recovered", err)
			}
		})
	}
}

func TestRetryGivesUpOnUnreachableServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = fastClient(t, "http://"+addr, "").ListRuns(context.Background(), "main", false)
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("err = %v, want one saying the server is unreachable", err)
	}
}

func TestRunLogsFollowResumesWithoutDuplicates(t *testing.T) {
	// The first connection sends lines 0..2 and breaks mid-stream; the
	// second replays from the start (as after a restart without offset)
	// and finishes. Each line must arrive exactly once, in order.
	var conns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("follow") != "true" {
			t.Errorf("follow not requested: %s", r.URL)
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		n := conns.Add(1)
		last := 5
		if n == 1 {
			last = 2
		}
		for i := 0; i <= last; i++ {
			fmt.Fprintf(w, `{"job":"j0","offset":%d,"stream":"stdout","line":"line %d"}`+"\n", i, i)
			w.(http.Flusher).Flush()
		}
		if n == 1 {
			// Break the chunked stream: hijack and close without the final chunk.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}
	}))
	defer srv.Close()
	var got []string
	err := fastClient(t, srv.URL, "").RunLogs(context.Background(), "main", "r", LogOptions{Follow: true}, func(e LogEntry) error {
		got = append(got, e.Line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"line 0", "line 1", "line 2", "line 3", "line 4", "line 5"}
	if strings.Join(got, ",") != strings.Join(want, ",") || conns.Load() != 2 {
		t.Fatalf("got %v over %d connections, want %v over 2", got, conns.Load(), want)
	}
}

func TestRunLogsStopsWhenCallbackFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 10 {
			fmt.Fprintf(w, `{"job":"j0","offset":%d,"line":"%s"}`+"\n", i, strconv.Itoa(i))
		}
	}))
	defer srv.Close()
	stop := errors.New("enough")
	n := 0
	err := fastClient(t, srv.URL, "").RunLogs(context.Background(), "main", "r", LogOptions{}, func(LogEntry) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 3 {
		t.Fatalf("err = %v after %d lines, want the callback's error after 3", err, n)
	}
}

func TestNewClientRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "localhost:3000", "ftp://x", "http://"} {
		if _, err := NewClient(u, "", nil); err == nil {
			t.Errorf("NewClient(%q) accepted it", u)
		}
	}
}

func TestClientEnvSendsOnlyWhatTheConfigurationRefersTo(t *testing.T) {
	src := []byte("type: task\nenv:\n  - HF_TOKEN\n  - MODE=fast\n  - UNSET_ONE\ncommands:\n  - echo ${{ env.WANDB_KEY }} ${{ secrets.S }}\n")
	cfg, err := Parse("t.yml", src)
	if err != nil {
		t.Fatal(err)
	}
	client := map[string]string{"HF_TOKEN": "hf", "WANDB_KEY": "wb", "MODE": "slow", "HOME": "/root", "S": "not-a-secret"}
	got := ClientEnv(cfg, src, func(k string) (string, bool) { v, ok := client[k]; return v, ok })
	want := map[string]string{"HF_TOKEN": "hf", "WANDB_KEY": "wb"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ClientEnv = %v, want %v (valued entries, secrets, unset and unrelated variables stay out)", got, want)
	}
	if env := ClientEnv(cfg, []byte("type: task\ncommands: [x]\n"), func(string) (string, bool) { return "", false }); env != nil && len(env) != 0 {
		t.Fatalf("nothing set: ClientEnv = %v, want none", env)
	}
}

func TestBackoffDoublesUpToItsCap(t *testing.T) {
	b := Backoff{First: 250 * time.Millisecond, Max: 2 * time.Second}
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second}
	for i, w := range want {
		if got := b.Delay(i + 1); got != w {
			t.Errorf("Delay(%d) = %s, want %s", i+1, got, w)
		}
	}
	if got := b.Delay(1000); got != 2*time.Second {
		t.Errorf("Delay(1000) = %s, want the cap", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if (Backoff{First: time.Hour}).Sleep(ctx, 1) {
		t.Error("Sleep on an ended context reported a full wait")
	}
}
