package daemon

import (
	"net/http"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
)

// TestAuthorizationMatrix calls every project endpoint as no one, as a
// user of another project, and as user, manager and admin of the project,
// and checks each answer; lists never show another project's records.
func TestAuthorizationMatrix(t *testing.T) {
	ts := startServer(t, "1xH100:80GB")
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	tokens := map[string]string{"none": ""}
	for _, u := range []string{"outsider", "usr", "mgr", "padmin"} {
		tokens[u] = ts.user(u)
	}
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/other/members/outsider", api.SetMemberRequest{Role: "admin"}, nil)
	for u, role := range map[string]string{"usr": "user", "mgr": "manager", "padmin": "admin"} {
		ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/members/"+u, api.SetMemberRequest{Role: role}, nil)
	}
	ts.must(http.StatusOK, tokens["outsider"], "PUT", "/api/v1/projects/other/secrets/OTHER_SECRET", api.SetSecretRequest{Value: "x"}, nil)
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/secrets/S", api.SetSecretRequest{Value: "v"}, nil)
	task := yamlApply("type: task\nname: t1\ncommands: [echo hi]\nresources: {cpu: 0.., memory: 1MB.., disk: 1GB..}\n")
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", task, nil)
	ts.must(http.StatusCreated, tokens["outsider"], "POST", "/api/v1/projects/other/runs/apply", task, nil)

	queue := api.ApplyRequest{ConfigurationYAML: "type: queue\nname: q1\n"}
	fleet := api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: f1\nnodes: 1\n"}
	// want: the minimal role; callers below it get 403, outsiders and
	// anonymous callers 404 / 401.
	type endpoint struct {
		method, path string
		body         any
		role         string
		ok           int
	}
	p := "/api/v1/projects/main"
	endpoints := []endpoint{
		{"GET", p, nil, "user", 200},
		{"GET", p + "/members", nil, "user", 200},
		{"PUT", p + "/members/usr", api.SetMemberRequest{Role: "user"}, "manager", 200},
		{"POST", p + "/runs/plan", task, "user", 200},
		{"GET", p + "/runs", nil, "user", 200},
		{"GET", p + "/runs/t1", nil, "user", 200},
		{"GET", p + "/runs/t1/logs", nil, "user", 200},
		{"GET", p + "/runs/t1/events", nil, "user", 200},
		{"GET", p + "/events", nil, "user", 200},
		{"POST", p + "/runs/t1/stop", api.StopRunRequest{}, "user", 200},
		{"GET", p + "/fleets", nil, "user", 200},
		{"GET", p + "/fleets/local", nil, "user", 200},
		{"POST", p + "/fleets/apply", fleet, "manager", 200},
		{"GET", p + "/instances", nil, "user", 200},
		{"GET", p + "/offers", nil, "user", 200},
		{"POST", p + "/queues/apply", queue, "manager", 200},
		{"GET", p + "/queues", nil, "user", 200},
		{"GET", p + "/secrets", nil, "user", 200},
		{"GET", p + "/secrets/S", nil, "manager", 200},
		{"PUT", p + "/secrets/S", api.SetSecretRequest{Value: "v"}, "manager", 200},
		{"DELETE", p + "/queues/q1", nil, "manager", 204},
		{"DELETE", p + "/fleets/f1", nil, "manager", 204},
		{"DELETE", p + "/secrets/S", nil, "manager", 204},
	}
	rank := map[string]int{"usr": 1, "mgr": 2, "padmin": 3}
	for _, ep := range endpoints {
		for _, who := range []string{"none", "outsider", "usr", "mgr", "padmin"} {
			want := ep.ok
			switch {
			case who == "none":
				want = http.StatusUnauthorized
			case who == "outsider":
				want = http.StatusNotFound
			case rank[who] < roleRank(ep.role):
				want = http.StatusForbidden
			}
			// Deletes succeed once; later callers find nothing to delete.
			got, se := ts.call(tokens[who], ep.method, ep.path, ep.body, nil)
			if ep.method == "DELETE" && want == ep.ok && got == http.StatusNotFound && se.Code == api.CodeNotFound {
				continue
			}
			if got != want {
				t.Errorf("%s %s as %s: status %d (%s), want %d", ep.method, ep.path, who, got, se.Error(), want)
			}
			if ep.method == "PUT" || ep.method == "POST" {
				if strings.HasSuffix(ep.path, "/fleets/apply") && got == 200 {
					ts.must(http.StatusNoContent, ts.admin, "DELETE", p+"/fleets/f1", nil, nil)
				}
				if strings.HasSuffix(ep.path, "/queues/apply") && got == 200 {
					ts.must(http.StatusNoContent, ts.admin, "DELETE", p+"/queues/q1", nil, nil)
				}
			}
		}
		// Re-create what the deletes removed so the next caller finds it.
		if ep.method == "DELETE" {
			continue
		}
	}
	adminOnly := []endpoint{
		{"GET", "/api/v1/users", nil, "", 200},
		{"POST", "/api/v1/projects", api.CreateProjectRequest{Name: "p3"}, "", 201},
		{"POST", "/api/v1/agents/heartbeat", api.Heartbeat{Instance: "sim-1"}, "", 200},
	}
	for _, ep := range adminOnly {
		for _, who := range []string{"none", "outsider", "usr", "mgr", "padmin"} {
			want := http.StatusForbidden
			if who == "none" {
				want = http.StatusUnauthorized
			}
			if got, se := ts.call(tokens[who], ep.method, ep.path, ep.body, nil); got != want {
				t.Errorf("%s %s as %s: status %d (%s), want %d", ep.method, ep.path, who, got, se.Error(), want)
			}
		}
		ts.must(ep.ok, ts.admin, ep.method, ep.path, ep.body, nil)
	}
	// Nothing of another project leaks into lists.
	var runs []api.Run
	ts.must(http.StatusOK, tokens["usr"], "GET", p+"/runs?all=true", nil, &runs)
	for _, r := range runs {
		if r.Project != "main" {
			t.Errorf("run %s of project %s listed in main", r.Name, r.Project)
		}
	}
	var secrets []api.Secret
	ts.must(http.StatusOK, tokens["usr"], "GET", p+"/secrets", nil, &secrets)
	for _, s := range secrets {
		if s.Name == "OTHER_SECRET" || s.Value != nil {
			t.Errorf("secret list leaks %+v", s)
		}
	}
	var projects []api.Project
	ts.must(http.StatusOK, tokens["usr"], "GET", "/api/v1/projects", nil, &projects)
	if len(projects) != 1 || projects[0].Name != "main" {
		t.Errorf("user sees projects %+v, want only main", projects)
	}
}
