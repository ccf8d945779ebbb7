package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"gpud.dev/gpud/api"
)

// authFixture is a server with two projects: main, where usr, mgr and
// padmin hold the user, manager and admin roles, and other, whose admin
// (outsider) has no role in main. Each project has a run t1 and a secret.
type authFixture struct {
	*testServer
	tokens map[string]string // caller -> token; "none" has none
}

// callers, in the order the matrix tries them.
var callers = []string{"none", "outsider", "usr", "mgr", "padmin", "gadmin"}

// projectRank is each caller's rank in project main (gadmin holds every role).
var projectRank = map[string]int{"usr": 1, "mgr": 2, "padmin": 3, "gadmin": 3}

func newAuthFixture(t *testing.T) *authFixture {
	ts := startServer(t, "1xH100:80GB")
	f := &authFixture{testServer: ts, tokens: map[string]string{"none": "", "gadmin": ts.admin}}
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	for _, u := range []string{"outsider", "usr", "mgr", "padmin"} {
		f.tokens[u] = ts.user(u)
	}
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/other/members/outsider", api.SetMemberRequest{Role: "admin"}, nil)
	for u, role := range map[string]string{"usr": "user", "mgr": "manager", "padmin": "admin"} {
		ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/members/"+u, api.SetMemberRequest{Role: role}, nil)
	}
	ts.must(http.StatusOK, f.tokens["outsider"], "PUT", "/api/v1/projects/other/secrets/OTHER_SECRET", api.SetSecretRequest{Value: "x"}, nil)
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/secrets/S", api.SetSecretRequest{Value: "v"}, nil)
	task := yamlApply("type: task\nname: t1\ncommands: [echo hi]\nresources: {cpu: 0.., memory: 1MB.., disk: 1GB..}\n")
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply", task, nil)
	ts.must(http.StatusCreated, f.tokens["outsider"], "POST", "/api/v1/projects/other/runs/apply", task, nil)
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply", api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: f1\nnodes: 0..1\n"}, nil)
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/queues/apply", api.ApplyRequest{ConfigurationYAML: "type: queue\nname: q1\n"}, nil)
	return f
}

// fillPath puts values into a route's path parameters.
func fillPath(path string, vals map[string]string) string {
	path = strings.ReplaceAll(path, "{path...}", "")
	for k, v := range vals {
		path = strings.ReplaceAll(path, "{"+k+"}", v)
	}
	return path
}

// denial is the answer a caller without access to rt gets when calling it
// on project, or 0 when the caller has access.
func denial(rt api.Route, who, project string) (status int, code string) {
	if rt.Access == api.AccessPublic {
		return 0, ""
	}
	if who == "none" {
		return http.StatusUnauthorized, api.CodeUnauthorized
	}
	switch rt.Access {
	case api.AccessAuthenticated:
		return 0, ""
	case api.AccessGlobalAdmin:
		if who != "gadmin" {
			return http.StatusForbidden, api.CodeForbidden
		}
		return 0, ""
	case api.AccessSelf:
		if who != "gadmin" && who != "usr" { // the path names usr
			return http.StatusNotFound, api.CodeNotFound
		}
		return 0, ""
	}
	member := (project == "main" && projectRank[who] > 0) || (project == "other" && (who == "outsider" || who == "gadmin"))
	if !member {
		return http.StatusNotFound, api.CodeProjectNotFound
	}
	rank := projectRank[who]
	if project == "other" {
		rank = 3 // outsider is other's admin
	}
	if rank < roleRank(rt.Access.ProjectRole()) {
		return http.StatusForbidden, api.CodeForbidden
	}
	return 0, ""
}

// TestAuthorizationMatrix is generated from api.Routes: every route is
// called by every kind of caller — anonymous, a member of another project,
// user, manager and admin of the project, a global admin — on its own
// project and on a foreign one. A caller without the route's access gets
// exactly the denial the table promises (before its body is even read);
// a caller with it is never refused for authorization and never meets a
// 5xx. Lists never show another project's records.
func TestAuthorizationMatrix(t *testing.T) {
	f := newAuthFixture(t)
	vals := map[string]string{"user": "usr", "run": "t1", "fleet": "f1", "id": "nosuchtoken", "queue": "q1", "name": "S"}
	// Denials first: a denied call changes nothing, so every route sees
	// the same fixture.
	denied := 0
	for _, rt := range api.Routes {
		method := rt.Method
		if method == "" {
			method = "GET"
		}
		for _, project := range []string{"main", "other"} {
			vals["project"] = project
			path := fillPath(rt.Path, vals)
			for _, who := range callers {
				want, code := denial(rt, who, project)
				if want == 0 {
					continue
				}
				denied++
				got, se := f.call(f.tokens[who], method, path, nil, nil)
				if got != want || se.Code != code {
					t.Errorf("%s %s as %s: %d %s (%s), want %d %s", method, path, who, got, se.Code, se.Message, want, code)
				}
			}
		}
	}
	// Then every caller with access, on main; calls that destroy what
	// others need aim at things made for them.
	n := 0
	for _, rt := range api.Routes {
		method := rt.Method
		if method == "" {
			method = "GET"
		}
		for _, who := range callers {
			if want, _ := denial(rt, who, "main"); want != 0 {
				continue
			}
			n++
			v := map[string]string{}
			for k, x := range vals {
				v[k] = x
			}
			v["project"] = "main"
			var body any
			switch rt.Pattern() {
			case "DELETE /api/v1/users/{user}":
				v["user"] = fmt.Sprintf("doomed%d", n)
				f.user(v["user"])
			case "DELETE /api/v1/projects/{project}":
				v["project"] = fmt.Sprintf("doomed%d", n)
				f.must(http.StatusCreated, f.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: v["project"]}, nil)
			case "DELETE /api/v1/projects/{project}/members/{user}":
				v["user"] = fmt.Sprintf("leaving%d", n)
				f.user(v["user"])
				f.must(http.StatusOK, f.admin, "PUT", "/api/v1/projects/main/members/"+v["user"], api.SetMemberRequest{Role: "user"}, nil)
			case "POST /api/v1/users":
				body = api.CreateUserRequest{Name: fmt.Sprintf("new%d", n)}
			case "POST /api/v1/projects":
				body = api.CreateProjectRequest{Name: fmt.Sprintf("new%d", n)}
			case "PUT /api/v1/projects/{project}/members/{user}":
				body = api.SetMemberRequest{Role: "user"}
			case "PUT /api/v1/projects/{project}/secrets/{name}":
				body = api.SetSecretRequest{Value: "v"}
			case "POST /api/v1/projects/{project}/runs/{run}/keys":
				// Keys are the run's submitter's or a manager's to make
				// (TestServiceKeysOpenOnlyTheirServiceAndDieOnRevoke): a
				// plain user aims at a run of its own.
				if who == "usr" {
					v["run"] = "usrtask"
					f.must(http.StatusCreated, f.tokens["usr"], "POST", "/api/v1/projects/main/runs/apply",
						yamlApply("type: task\nname: usrtask\ncommands: [echo hi]\nresources: {cpu: 0.., memory: 1MB.., disk: 1GB..}\n"), nil)
				}
			}
			path := fillPath(rt.Path, v)
			var ut api.UserToken
			var out any
			if rt.Pattern() == "POST /api/v1/users/{user}/token" {
				out = &ut
			}
			got, se := f.call(f.tokens[who], method, path, body, out)
			if got == http.StatusUnauthorized || got == http.StatusForbidden || se.Code == api.CodeProjectNotFound || got >= 500 {
				t.Errorf("%s %s as %s (has %s): %d %s (%s)", method, path, who, rt.Access, got, se.Code, se.Message)
			}
			if ut.Token != "" { // the rotated token replaces usr's
				f.tokens["usr"] = ut.Token
			}
		}
	}
	if denied < 3*len(api.Routes) || n < len(api.Routes) {
		t.Fatalf("the matrix made %d denied and %d allowed calls for %d routes: too few to prove anything", denied, n, len(api.Routes))
	}
	t.Logf("%d routes: %d denied calls, %d allowed calls", len(api.Routes), denied, n)
	// Nothing of another project leaks into lists.
	p := "/api/v1/projects/main"
	var runs []api.Run
	f.must(http.StatusOK, f.tokens["usr"], "GET", p+"/runs?all=true", nil, &runs)
	for _, r := range runs {
		if r.Project != "main" {
			t.Errorf("run %s of project %s listed in main", r.Name, r.Project)
		}
	}
	var secrets []api.Secret
	f.must(http.StatusOK, f.tokens["usr"], "GET", p+"/secrets", nil, &secrets)
	for _, s := range secrets {
		if s.Name == "OTHER_SECRET" || s.Value != nil {
			t.Errorf("secret list leaks %+v", s)
		}
	}
	var projects []api.Project
	f.must(http.StatusOK, f.tokens["usr"], "GET", "/api/v1/projects", nil, &projects)
	if len(projects) != 1 || projects[0].Name != "main" {
		t.Errorf("user sees projects %+v, want only main", projects)
	}
}

// A manager of a project once could demote or remove the project's admin
// (PUT/DELETE of members). A member never grants, lowers or removes a role
// above its own; equal and lower roles stay its to manage.
func TestMemberNeverChangesARoleAboveItsOwn(t *testing.T) {
	f := newAuthFixture(t)
	f.user("usr2")
	f.must(http.StatusOK, f.admin, "PUT", "/api/v1/projects/main/members/usr2", api.SetMemberRequest{Role: "manager"}, nil)
	mgr, p := f.tokens["mgr"], "/api/v1/projects/main/members/"
	tests := []struct {
		name, method, user, role string
		want                     int
	}{
		{"manager cannot demote the admin", "PUT", "padmin", "user", http.StatusForbidden},
		{"manager cannot keep the admin an admin either", "PUT", "padmin", "admin", http.StatusForbidden},
		{"manager cannot remove the admin", "DELETE", "padmin", "", http.StatusForbidden},
		{"manager cannot grant admin", "PUT", "usr", "admin", http.StatusForbidden},
		{"manager may promote a user to manager", "PUT", "usr", "manager", http.StatusOK},
		{"manager may demote a fellow manager", "PUT", "usr2", "user", http.StatusOK},
		{"manager may remove a user", "DELETE", "usr2", "", http.StatusNoContent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.method == "PUT" {
				body = api.SetMemberRequest{Role: tc.role}
			}
			got, se := f.call(mgr, tc.method, p+tc.user, body, nil)
			if got != tc.want {
				t.Fatalf("%s %s: %d (%s), want %d", tc.method, tc.user, got, se.Message, tc.want)
			}
		})
	}
	var members []api.Member
	f.must(http.StatusOK, f.admin, "GET", "/api/v1/projects/main/members", nil, &members)
	for _, m := range members {
		if m.User == "padmin" && m.Role != "admin" {
			t.Errorf("padmin is %s after the manager's attempts, want admin", m.Role)
		}
	}
	// The project's admin still manages everyone.
	f.must(http.StatusOK, f.tokens["padmin"], "PUT", p+"mgr", api.SetMemberRequest{Role: "user"}, nil)
}

// PUT of a secret with {}, {"value": null} or {"value": ""} once blanked
// it with 200. A secret's value is required and non-empty; the stored
// value survives every such attempt.
func TestSecretValueIsRequired(t *testing.T) {
	f := newAuthFixture(t)
	path := "/api/v1/projects/main/secrets/S"
	for _, body := range []string{`{}`, `{"value": null}`, `{"value": ""}`} {
		got, se := f.call(f.tokens["mgr"], "PUT", path, []byte(body), nil)
		if got != http.StatusBadRequest || se.Field != "value" {
			t.Errorf("PUT %s: %d %s field %q, want 400 naming the value", body, got, se.Code, se.Field)
		}
	}
	var s api.Secret
	f.must(http.StatusOK, f.tokens["mgr"], "GET", path, nil, &s)
	if s.Value == nil || *s.Value != "v" {
		t.Fatalf("secret after the refused writes: %+v, want value v", s)
	}
}
