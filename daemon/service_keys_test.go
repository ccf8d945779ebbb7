package daemon

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestServiceKeysOpenOnlyTheirServiceAndDieOnRevoke: a per-service key,
// made by the service's submitter (a plain user; a colleague of the same
// role is refused), opens that service through the gateway and the
// replica never sees it; it opens no other service (of the project, nor
// a service of the same name in another project), not the API, not the
// model endpoint. A listing never holds it, nor do the run's events. The
// key survives the run being stopped and applied again under its name;
// a revoke holds at the very next request; a key dies with its maker's
// membership, and a new account of the maker's name does not revive it.
func TestServiceKeysOpenOnlyTheirServiceAndDieOnRevoke(t *testing.T) {
	ts := startServer(t, "")
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	owner, peer, outsider := ts.userMember("owner"), ts.userMember("peer"), ts.user("outsider")
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/other/members/outsider", api.SetMemberRequest{Role: "admin"}, nil)
	portA := freeLoopbackPort(t)
	svcA := serviceConfig(t, "svca", portA, "")
	ts.must(http.StatusCreated, owner, "POST", "/api/v1/projects/main/runs/apply", yamlApply(svcA), nil)
	ts.submit(serviceConfig(t, "svcb", freeLoopbackPort(t), ""))
	ts.submit(serviceConfig(t, "open", freeLoopbackPort(t), "auth: false\n"))
	ts.must(http.StatusCreated, outsider, "POST", "/api/v1/projects/other/runs/apply", yamlApply(serviceConfig(t, "svca", freeLoopbackPort(t), "")), nil)
	serving := func(path, token string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, func() error {
			if code, body := ts.proxyGet(path, "Bearer "+token); code != http.StatusOK {
				return fmt.Errorf("%s: %d %s", path, code, body)
			}
			return nil
		})
	}
	serving("/proxy/services/main/svca/ready", owner)
	serving("/proxy/services/main/svcb/ready", owner)
	serving("/proxy/services/main/open/ready", owner)
	serving("/proxy/services/other/svca/ready", outsider)

	keys := "/api/v1/projects/main/runs/svca/keys"
	if code, se := ts.call(peer, "POST", keys, api.CreateServiceKeyRequest{Name: "ci"}, nil); code != http.StatusForbidden {
		t.Errorf("a plain member creating a key for another's service: %d %s, want 403", code, se.Message)
	}
	if code, _ := ts.call(outsider, "POST", keys, api.CreateServiceKeyRequest{Name: "ci"}, nil); code != http.StatusNotFound {
		t.Errorf("another project's admin creating a key: %d, want 404", code)
	}
	var k api.ServiceKey
	ts.must(http.StatusCreated, owner, "POST", keys, api.CreateServiceKeyRequest{Name: "ci"}, &k)
	if !strings.HasPrefix(k.Key, api.ServiceKeyPrefix) || len(k.Key) < len(api.ServiceKeyPrefix)+43 || k.Name != "ci" || k.Run != "svca" {
		t.Fatalf("created key %+v", k)
	}
	if code, _ := ts.call(owner, "POST", keys, api.CreateServiceKeyRequest{Name: "ci"}, nil); code != http.StatusConflict {
		t.Errorf("a second key named ci: %d, want 409", code)
	}
	bearer := "Bearer " + k.Key

	tests := []struct {
		name, path string
		code       int
		body       string
	}{
		{"its service, the key stripped", "/proxy/services/main/svca/x", http.StatusOK, "path=/x auth=\n"},
		{"another service of the project", "/proxy/services/main/svcb/x", http.StatusUnauthorized, `"code":"unauthorized"`},
		{"an open service: answers, and never sees the key", "/proxy/services/main/open/x", http.StatusOK, "path=/x auth=\n"},
		{"a service of the same name in another project", "/proxy/services/other/svca/x", http.StatusUnauthorized, `"code":"unauthorized"`},
		{"the API", "/api/v1/projects/main/runs", http.StatusUnauthorized, `"code":"unauthorized"`},
		{"the model endpoint", "/proxy/models/main/v1/models", http.StatusUnauthorized, `unauthorized`},
	}
	for _, tt := range tests {
		code, body := ts.proxyGet(tt.path, bearer)
		if code != tt.code || !strings.Contains(body, tt.body) {
			t.Errorf("%s (%s): %d %q, want %d with %q", tt.name, tt.path, code, body, tt.code, tt.body)
		}
	}
	if code, _ := ts.proxyGet("/proxy/services/main/svca/x", bearer+"x"); code != http.StatusUnauthorized {
		t.Errorf("a mistyped key: %d, want 401", code)
	}
	if code, _ := ts.proxyGet("/proxy/services/main/svca/x", ""); code != http.StatusUnauthorized {
		t.Errorf("no key: %d, want 401", code)
	}

	// A listing shows names and dates, never a key; neither do events.
	for _, who := range []string{peer, owner, ts.admin} {
		resp := ts.rawGet(keys, "Bearer "+who)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"name":"ci"`) {
			t.Fatalf("list: %d %s %v", resp.StatusCode, raw, err)
		}
		if strings.Contains(string(raw), k.Key) || strings.Contains(string(raw), k.Key[len(api.ServiceKeyPrefix):]) {
			t.Fatalf("the key list holds the key: %s", raw)
		}
	}
	if code, _ := ts.call(owner, "GET", "/api/v1/projects/main/runs/nosuch/keys", nil, nil); code != http.StatusNotFound {
		t.Errorf("the keys of a run that never was: %d, want 404", code)
	}
	resp := ts.rawGet("/api/v1/projects/main/events", "Bearer "+ts.admin)
	events, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(events), "service key ci created by owner") || strings.Contains(string(events), k.Key[len(api.ServiceKeyPrefix):]) {
		t.Errorf("events (%v): want the creation without the key: %s", err, events)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		var ks []api.ServiceKey
		ts.must(http.StatusOK, owner, "GET", keys, nil, &ks)
		if len(ks) != 1 || ks[0].LastUsedAt == nil || ks[0].Key != "" {
			return fmt.Errorf("keys %+v: want ci with its last use", ks)
		}
		return nil
	})

	// The key is the run name's: stop the run, apply it again (a new run
	// of the same name) and the key opens it.
	ts.must(http.StatusOK, owner, "POST", "/api/v1/projects/main/runs/svca/stop", api.StopRunRequest{}, nil)
	ts.waitRun("svca", "terminated", "", 60*time.Second)
	ts.must(http.StatusCreated, owner, "POST", "/api/v1/projects/main/runs/apply", yamlApply(svcA), nil)
	serving("/proxy/services/main/svca/again", k.Key)

	// Revoked: refused at the next request, by the colleague not at all.
	if code, _ := ts.call(peer, "DELETE", keys+"/ci", nil, nil); code != http.StatusForbidden {
		t.Errorf("a plain member revoking another's key: %d, want 403", code)
	}
	ts.must(http.StatusNoContent, owner, "DELETE", keys+"/ci", nil, nil)
	if code, body := ts.proxyGet("/proxy/services/main/svca/x", bearer); code != http.StatusUnauthorized {
		t.Errorf("a revoked key, at once: %d %q, want 401", code, body)
	}
	if code, _ := ts.call(owner, "DELETE", keys+"/ci", nil, nil); code != http.StatusNotFound {
		t.Errorf("revoking twice: %d, want 404", code)
	}

	// A key never outlives its maker's place in the project; a manager
	// revokes what a member left behind.
	var k2 api.ServiceKey
	ts.must(http.StatusCreated, owner, "POST", keys, nil, &k2)
	if !strings.HasPrefix(k2.Name, "key-") {
		t.Errorf("a key made without a name is named %q", k2.Name)
	}
	if code, _ := ts.proxyGet("/proxy/services/main/svca/x", "Bearer "+k2.Key); code != http.StatusOK {
		t.Fatalf("the second key: %d", code)
	}
	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/main/members/owner", nil, nil)
	if code, _ := ts.proxyGet("/proxy/services/main/svca/x", "Bearer "+k2.Key); code != http.StatusUnauthorized {
		t.Errorf("a key whose maker left the project: %d, want 401", code)
	}
	// Nor does a namesake revive it: the account is deleted, one of the
	// same name made and made a member again.
	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/users/owner", nil, nil)
	ts.userMember("owner")
	if code, _ := ts.proxyGet("/proxy/services/main/svca/x", "Bearer "+k2.Key); code != http.StatusUnauthorized {
		t.Errorf("a key whose maker's name belongs to a new account: %d, want 401", code)
	}
	ts.must(http.StatusNoContent, ts.admin, "DELETE", keys+"/"+k2.Name, nil, nil)
}
