package daemon

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
)

// The SSRF mend (docs/security.md): a project admin who is not a global
// admin cannot make the server's Kubernetes plugin connect to the
// server's own host or network: a kubeconfig_data cluster server (or
// proxy-url) at loopback, the link-local cloud metadata address, the
// unspecified address, or a name resolving to loopback is refused at
// `gpud backend add` with the field and the reason, before any plugin
// runs, and nothing is stored; a global admin may name the same
// kubeconfig (here the test cluster's real API server on 127.0.0.1).
func TestProjectAdminCannotPointABackendAtTheServersOwnNetwork(t *testing.T) {
	ts, c := kubeServer(t)
	padmin := ts.user("padmin")
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/members/padmin", api.SetMemberRequest{Role: "admin"}, nil)
	raw, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := string(raw)
	server := regexp.MustCompile(`server: *(\S+)`).FindStringSubmatch(kubeconfig)
	if server == nil || !strings.HasPrefix(server[1], "https://127.0.0.1:") {
		t.Fatalf("the test cluster's kubeconfig names no loopback server:\n%s", kubeconfig)
	}
	port := server[1][strings.LastIndex(server[1], ":"):]
	withServer := func(url string) string { return strings.Replace(kubeconfig, server[1], url, 1) }
	add := func(token string, fields map[string]any) (int, api.ServerError) {
		t.Helper()
		cfg, err := json.Marshal(fields)
		if err != nil {
			t.Fatal(err)
		}
		return ts.call(token, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "inline", Type: "kubernetes", Config: cfg}, nil)
	}
	for _, tc := range []struct {
		fields map[string]any
		words  []string
	}{
		{map[string]any{"kubeconfig_data": kubeconfig}, []string{"kubeconfig_data", "cluster.server", server[1], "loopback", "global admin"}},
		{map[string]any{"kubeconfig_data": withServer("http://169.254.169.254")}, []string{"cluster.server", "169.254.169.254", "link-local"}},
		{map[string]any{"kubeconfig_data": withServer(strings.TrimPrefix(server[1], "https://"))}, []string{"cluster.server", "loopback"}},
		{map[string]any{"kubeconfig_data": strings.Replace(kubeconfig, "server:", "Server:", 1)}, []string{"cluster.Server", "loopback"}},
		{map[string]any{"kubeconfig_data": withServer("https://localhost" + port)}, []string{"cluster.server", "localhost resolves to", "loopback"}},
		{map[string]any{"kubeconfig_data": withServer("https://[::1]" + port)}, []string{"loopback"}},
		{map[string]any{"kubeconfig_data": withServer("https://[::ffff:127.0.0.1]" + port)}, []string{"loopback"}},
		{map[string]any{"kubeconfig_data": withServer("https://0.0.0.0" + port)}, []string{"unspecified"}},
		{map[string]any{"kubeconfig_data": strings.Replace(withServer("https://203.0.113.9:6443"), "server: https://203.0.113.9:6443", "server: https://203.0.113.9:6443\n    proxy-url: http://127.0.0.1:3128", 1)},
			[]string{"cluster.proxy-url", "127.0.0.1:3128", "loopback"}},
		{map[string]any{"kubeconfig_data": withServer("https://203.0.113.9:6443"), "kai": map[string]any{"endpoint": "http://169.254.169.254/latest/meta-data"}}, []string{"kai.endpoint", "link-local"}},
	} {
		code, se := add(padmin, tc.fields)
		msg := se.Message + " " + strings.Join(se.Errors, " ")
		t.Logf("%d %s: %s", code, se.Field, msg)
		if code != http.StatusBadRequest || se.Field != "config" {
			t.Fatalf("a project admin's backend at the server's own network: %d %+v, want 400 on config", code, se)
		}
		for _, w := range tc.words {
			if !strings.Contains(msg, w) {
				t.Fatalf("the refusal %q lacks %q", msg, w)
			}
		}
	}
	var list []api.Backend
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/backends", nil, &list)
	if len(list) != 1 || list[0].Name != "k8s" {
		t.Fatalf("after the refusals the backends are %+v, want k8s alone", list)
	}
	// A global admin may name any address: the same kubeconfig is checked
	// with the real API server and stored.
	if code, se := add(ts.admin, map[string]any{"kubeconfig_data": kubeconfig, "namespace": "gpud"}); code != http.StatusOK {
		t.Fatalf("a global admin's inline kubeconfig on 127.0.0.1: %d %+v", code, se)
	}
}
