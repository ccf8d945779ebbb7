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

// TestServiceCustomDomainIsServedWithItsOwnCertificate: a service that
// declares `domains: [api.example.test]` is reached at that hostname
// through the gateway, over TLS with a certificate for that name from the
// server's internal CA, and still at <run>.<domain>; a name no service
// declares gets no certificate. The plan refuses a hostname another
// project's service, or another service of the project, declares, or one
// under the server's domain or a gateway's; a gateway of another project
// is refused a domain covering it. Once the service ends, the name is no
// longer served and another project may declare it.
func TestServiceCustomDomainIsServedWithItsOwnCertificate(t *testing.T) {
	ts := startServerWith(t, Options{Runtime: "process", Domain: "gpud.test", GatewayTLS: GatewayTLSInternal,
		HTTPSListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"})
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	outsider := ts.user("outsider")
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/other/members/outsider", api.SetMemberRequest{Role: "admin"}, nil)
	ts.submit(serviceConfig(t, "web", freeLoopbackPort(t), "auth: false\ndomains: [API.example.test.]\n"))
	ts.waitRun("web", "running", "", 60*time.Second)

	cl := gatewayClient(t, ts.GatewayCACertPEM(), ts.GatewayHTTPSAddr())
	body, leaf := gatewayGet(t, cl, "https://api.example.test/x")
	if strings.TrimSpace(body) != "path=/x auth=" || leaf.DNSNames[0] != "api.example.test" {
		t.Fatalf("at its own domain: %q, certificate for %v", body, leaf.DNSNames)
	}
	if body, _ := gatewayGet(t, cl, "https://web.gpud.test/y"); strings.TrimSpace(body) != "path=/y auth=" {
		t.Fatalf("at <run>.<domain>: %q", body)
	}
	noCertificateFor(t, ts.GatewayHTTPSAddr(), "www.example.test")

	refused := func(token, project, yaml, want string) {
		t.Helper()
		status, se := ts.call(token, "POST", "/api/v1/projects/"+project+"/runs/apply", yamlApply(yaml), nil)
		if status != http.StatusUnprocessableEntity || se.Code != api.CodeNotHonoured || !strings.Contains(se.Error(), want) {
			t.Errorf("apply in %s: %d %s %q, want 422 not_honoured with %q", project, status, se.Code, se.Error(), want)
		}
	}
	port := freeLoopbackPort(t)
	refused(outsider, "other", serviceConfig(t, "web", port, "domains: [api.example.test]\n"), "declared by a service of another project")
	refused(ts.admin, "main", serviceConfig(t, "web2", port, "domains: [api.example.test]\n"), "declared by service web of this project")
	refused(ts.admin, "main", serviceConfig(t, "web3", port, "domains: [x.gpud.test]\n"), "under the server's own domain")
	refused(ts.admin, "main", serviceConfig(t, "web4", port, "domains: [\"*.example.test\"]\n"), "not a hostname")
	if status, se, _ := applyGateway(ts, "main", "type: gateway\nname: apps\ndomain: apps.example\n"); status != http.StatusOK {
		t.Fatalf("gateway apps: %d %s", status, se.Error())
	}
	refused(ts.admin, "main", serviceConfig(t, "web5", port, "domains: [x.apps.example]\n"), "under the domain of a gateway")
	status, se := ts.call(outsider, "POST", "/api/v1/projects/other/gateways/apply", api.ApplyRequest{ConfigurationYAML: "type: gateway\nname: grab\ndomain: example.test\n", Filename: "gateway.yml"}, nil)
	if status != http.StatusConflict || !strings.Contains(se.Message, "covers api.example.test") {
		t.Errorf("another project's gateway over the service's domain: %d %q, want 409", status, se.Message)
	}

	// The same run name applied again keeps its hostname.
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(serviceConfig(t, "web", freeLoopbackPort(t), "auth: false\ndomains: [api.example.test]\nenv: [V=2]\n")), nil)

	// A name is held while its service is active: once web ends, the
	// gateway no longer serves it there, and another project may take it.
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/web/stop", api.StopRunRequest{}, nil)
	ts.waitRun("web", "terminated", "", 60*time.Second)
	testutil.Eventually(t, 30*time.Second, func() error {
		resp, err := cl.Get("https://api.example.test/x")
		if err != nil {
			return nil // no handshake at all is fine too
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode == http.StatusOK || strings.Contains(string(b), "path=") {
			return fmt.Errorf("a stopped service's name still answers: %d %q %v", resp.StatusCode, b, err)
		}
		return nil
	})
	ts.must(http.StatusCreated, outsider, "POST", "/api/v1/projects/other/runs/apply", yamlApply(serviceConfig(t, "web", freeLoopbackPort(t), "domains: [api.example.test]\n")), nil)
}
