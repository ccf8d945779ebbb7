package daemon

import (
	"net/http"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
)

// TestGatewayApplyListDeleteAndDomainOwnership: a project's managers
// apply, list and delete gateways; one domain belongs to one project (a
// second project cannot take it, nor a name under it, nor the server's own
// domain, whose hosts the server gives to projects by name); one default
// per project; what would need a gateway instance is refused by name; a
// service naming a gateway that does not exist is refused at plan time.
func TestGatewayApplyListDeleteAndDomainOwnership(t *testing.T) {
	ts := startServerWith(t, Options{Runtime: "process", Domain: "gpud.test", GatewayTLS: GatewayTLSInternal,
		HTTPSListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"})
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)

	status, se, g := applyGateway(ts, "main", "type: gateway\nname: a\ndomain: A.Example.com\ndefault: true\nreplicas: 1\n")
	if status != http.StatusOK || g.Domain != "a.example.com" || !g.Default || g.Certificate != "lets-encrypt" || !g.Listening {
		t.Fatalf("apply a: %d %s %+v", status, se.Error(), g)
	}
	for _, tc := range []struct {
		project, yaml string
		status        int
		says          string
	}{
		{"other", "type: gateway\nname: a\ndomain: a.example.com\n", http.StatusConflict, "another project"},
		{"other", "type: gateway\nname: b\ndomain: x.a.example.com\n", http.StatusConflict, "another project"},
		{"other", "type: gateway\nname: c\ndomain: example.com\n", http.StatusConflict, "another project"},
		{"other", "type: gateway\nname: d\ndomain: main.gpud.test\n", http.StatusBadRequest, "server's own domain"},
		{"other", "type: gateway\nname: e\ndomain: gpud.test\n", http.StatusBadRequest, "server's own domain"},
		{"other", "type: gateway\nname: f\ndomain: not_a_host\n", http.StatusBadRequest, "not a hostname"},
		{"other", "type: gateway\nname: g\n", http.StatusBadRequest, "needs a domain"},
		{"other", "type: gateway\ndomain: n.example\n", http.StatusBadRequest, "needs a name"},
		{"other", "type: gateway\nname: h\ndomain: h.example\nreplicas: 2\n", http.StatusUnprocessableEntity, "replicas"},
		{"other", "type: gateway\nname: h\ndomain: h.example\npublic_ip: false\n", http.StatusUnprocessableEntity, "public_ip"},
		{"other", "type: gateway\nname: h\ndomain: h.example\ncertificate:\n  type: acm\n  arn: arn:aws:acm:x\n", http.StatusUnprocessableEntity, "Certificate Manager"},
		{"other", "type: gateway\nname: h\ndomain: h.example\nbackend: aws\nregion: eu-west-1\n", http.StatusUnprocessableEntity, "backend"},
	} {
		status, se, _ := applyGateway(ts, tc.project, tc.yaml)
		if status != tc.status || !strings.Contains(se.Error()+strings.Join(se.Errors, "\n"), tc.says) {
			t.Errorf("apply %q in %s: %d %s %q, want %d saying %q", tc.yaml, tc.project, status, se.Error(), se.Errors, tc.status, tc.says)
		}
	}

	// A second default clears the first's.
	if status, se, _ := applyGateway(ts, "main", "type: gateway\nname: b\ndomain: b.example.com\ndefault: true\n"); status != http.StatusOK {
		t.Fatalf("apply b: %d %s", status, se.Error())
	}
	var gs []api.Gateway
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/gateways", nil, &gs)
	if len(gs) != 2 || gs[0].Name != "a" || gs[0].Default || !gs[1].Default {
		t.Fatalf("gateways: %+v", gs)
	}

	// A service naming a gateway the project lacks is refused at plan time.
	status, se = ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(serviceConfig(t, "s", 1, "gateway: nosuch\n")), nil)
	if status != http.StatusUnprocessableEntity || !strings.Contains(strings.Join(se.Errors, "\n"), `no gateway "nosuch"`) {
		t.Fatalf("plan with gateway: nosuch: %d %s %q", status, se.Error(), se.Errors)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(serviceConfig(t, "s", 1, "gateway: a\n")), nil)

	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/main/gateways/a", nil, nil)
	ts.must(http.StatusNotFound, ts.admin, "DELETE", "/api/v1/projects/main/gateways/a", nil, nil)
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/gateways", nil, &gs)
	if len(gs) != 1 || gs[0].Name != "b" {
		t.Fatalf("after delete: %+v", gs)
	}
	// The domain is free again for another project.
	if status, se, _ := applyGateway(ts, "other", "type: gateway\nname: a\ndomain: a.example.com\n"); status != http.StatusOK {
		t.Fatalf("reuse a freed domain: %d %s", status, se.Error())
	}
}

// TestServiceGatewayIsRefusedWhereNoListenerServesIt: on a server without
// --domain a gateway can be applied (it says listening: false), but a
// service that asks for a gateway is refused at plan time, naming why,
// rather than planned and then unreachable.
func TestServiceGatewayIsRefusedWhereNoListenerServesIt(t *testing.T) {
	ts := startServer(t, "")
	plan := func(extra, want string) {
		t.Helper()
		status, se := ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(serviceConfig(t, "s", 1, extra)), nil)
		if status != http.StatusUnprocessableEntity || !strings.Contains(strings.Join(se.Errors, "\n"), want) {
			t.Errorf("plan with %q: %d %s %q, want 422 saying %q", extra, status, se.Error(), se.Errors, want)
		}
	}
	plan("gateway: true\n", "no gateway serves this project")
	status, se, g := applyGateway(ts, "main", "type: gateway\nname: apps\ndomain: apps.example.com\n")
	if status != http.StatusOK || g.Listening {
		t.Fatalf("apply on a server without --domain: %d %s %+v", status, se.Error(), g)
	}
	plan("gateway: apps\n", "runs no HTTPS listener")
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(serviceConfig(t, "s", 1, "gateway: false\n")), nil)
}
