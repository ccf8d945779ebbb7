package daemon

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestServiceRateLimitsAnswer429ThroughTheGateway: a service's
// rate_limits hold in the server's gateway: a client gets the rate's one
// request plus the burst, then 429 with Retry-After in seconds, while a
// prefix with its own looser limit keeps answering; the gateway's
// metrics count the refusals, for global admins only.
func TestServiceRateLimitsAnswer429ThroughTheGateway(t *testing.T) {
	ts := startServer(t, "")
	port := freeLoopbackPort(t)
	ts.submit(serviceConfig(t, "limited", port, `auth: false
rate_limits:
  - prefix: /
    rps: 0.01
    burst: 2
  - prefix: /free
    rps: 1000
    burst: 100
`))
	ts.waitRun("limited", "running", "", 60*time.Second)
	base := "/proxy/services/main/limited"
	testutil.Eventually(t, 30*time.Second, func() error {
		if code, body := ts.proxyGet(base+"/free/ready", ""); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	for i := range 3 {
		if code, body := ts.proxyGet(base+"/x", ""); code != http.StatusOK || !strings.Contains(body, "path=/x") {
			t.Fatalf("request %d within rps+burst: %d %q", i, code, body)
		}
	}
	resp := ts.rawGet(base+"/x", "")
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "rate_limited") {
		t.Fatalf("past the burst: %d %q, want 429 rate_limited", resp.StatusCode, body)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 100 {
		t.Errorf("Retry-After %q, want whole seconds in [1, 100] (rps 0.01)", resp.Header.Get("Retry-After"))
	}
	if code, _ := ts.proxyGet(base+"/free/y", ""); code != http.StatusOK {
		t.Errorf("the /free prefix has its own limit, yet answered %d", code)
	}

	if resp := ts.rawGet("/metrics", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d", resp.StatusCode)
	}
	resp = ts.rawGet("/metrics", "Bearer "+ts.admin)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := `gpud_gateway_requests_total{code="429",project="main",run="limited"} 1`; !strings.Contains(string(metrics), want) {
		t.Errorf("/metrics lacks %s:\n%s", want, metrics)
	}
}

// rawGet is a GET whose response the caller reads and closes.
func (ts *testServer) rawGet(path, auth string) *http.Response {
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
	return resp
}

// TestGatewayAuthorizesServiceCallersAsTheAPIDoes: through the gateway, a
// service with auth answers a member of its project, refuses a caller
// without a token (401) and a member of another project (404, as the API
// hides projects); no gpud token, anyone's, reaches a service's code.
func TestGatewayAuthorizesServiceCallersAsTheAPIDoes(t *testing.T) {
	ts := startServer(t, "")
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	member, outsider := ts.user("member"), ts.user("outsider")
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/members/member", api.SetMemberRequest{Role: "user"}, nil)
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/other/members/outsider", api.SetMemberRequest{Role: "admin"}, nil)
	ts.submit(serviceConfig(t, "closed", freeLoopbackPort(t), ""))
	ts.submit(serviceConfig(t, "open", freeLoopbackPort(t), "auth: false\n"))
	ts.waitRun("closed", "running", "", 60*time.Second)
	ts.waitRun("open", "running", "", 60*time.Second)
	testutil.Eventually(t, 30*time.Second, func() error {
		if code, body := ts.proxyGet("/proxy/services/main/open/ready", ""); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	tests := []struct {
		name, path, token string
		code              int
		body              string
	}{
		{"a member", "/proxy/services/main/closed/x", member, http.StatusOK, "path=/x auth=\n"},
		{"no token", "/proxy/services/main/closed/x", "", http.StatusUnauthorized, `"code":"unauthorized"`},
		{"a mistyped token", "/proxy/services/main/closed/x", "nope", http.StatusUnauthorized, `"code":"unauthorized"`},
		{"another project's admin", "/proxy/services/main/closed/x", outsider, http.StatusNotFound, `"code":"project_not_found"`},
		{"an open service, another project's token dropped", "/proxy/services/main/open/x", outsider, http.StatusOK, "path=/x auth=\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			auth := ""
			if tt.token != "" {
				auth = "Bearer " + tt.token
			}
			code, body := ts.proxyGet(tt.path, auth)
			if code != tt.code || !strings.Contains(body, tt.body) {
				t.Errorf("%s: %d %q, want %d with %q", tt.path, code, body, tt.code, tt.body)
			}
		})
	}
}
