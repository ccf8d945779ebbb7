package daemon

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// regServer is a server accepting registrations, with its CA file.
type regServer struct {
	*testServer
	bin, ca string
}

func startRegServer(t *testing.T, opts Options) *regServer {
	t.Helper()
	bin := staticGpud(t)
	opts.RegistrationListen = "127.0.0.1:0"
	if opts.Runtime == "" {
		opts.Runtime = "process"
	}
	ts := startServerWith(t, opts)
	return &regServer{testServer: ts, bin: bin, ca: filepath.Join(ts.opts.DataDir, RegistrationCAFile)}
}

// agent starts a real `gpud agent --server` with the token in its
// environment; dataDir ("" for a new one) holds its host key.
func (rs *regServer) agent(token, dataDir, hostname, gpus string) (testutil.RegisteringAgent, *exec.Cmd, *testutil.SyncBuffer) {
	a := testutil.RegisteringAgent{Bin: rs.bin, URL: rs.RegistrationURL(), Token: token, CA: rs.ca, FakeGPUs: gpus, DataDir: dataDir, Hostname: hostname}
	cmd, out := a.Start(rs.t)
	return a, cmd, out
}

// project creates project p and returns the token of user, its manager.
func (rs *regServer) project(p, user string) string {
	tok := rs.user(user)
	rs.must(http.StatusCreated, rs.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: p}, nil)
	rs.must(http.StatusOK, rs.admin, "PUT", "/api/v1/projects/"+p+"/members/"+user, api.SetMemberRequest{Role: api.RoleManager}, nil)
	return tok
}

// fleetWithToken applies fleet name in project p and issues a token.
func (rs *regServer) fleetWithToken(token, p, name string) api.RegistrationToken {
	rs.must(http.StatusOK, token, "POST", "/api/v1/projects/"+p+"/fleets/apply",
		api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: " + name + "\nnodes: 0..4\n"}, nil)
	var tok api.RegistrationToken
	rs.must(http.StatusCreated, token, "POST", "/api/v1/projects/"+p+"/fleets/"+name+"/tokens", nil, &tok)
	return tok
}

// waitInstances waits until fleet (as project p sees it) has n connected
// instances and returns them; outs explain a failure.
func (rs *regServer) waitInstances(p, fleet string, n int, outs ...*testutil.SyncBuffer) []api.Instance {
	rs.t.Helper()
	var f api.Fleet
	testutil.Eventually(rs.t, 30*time.Second, func() error {
		rs.must(http.StatusOK, rs.admin, "GET", "/api/v1/projects/"+p+"/fleets/"+fleet, nil, &f)
		connected := 0
		for _, in := range f.Instances {
			if rs.agents.get(in.ID) != nil {
				connected++
			}
		}
		if len(f.Instances) != n || connected != n {
			var why strings.Builder
			for _, o := range outs {
				why.WriteString(o.String())
			}
			return testutil.Errorf("fleet %s: %d instances (%d connected), want %d: %+v\n%s", fleet, len(f.Instances), connected, n, f.Instances, why.String())
		}
		return nil
	})
	return f.Instances
}

// TestSharedFleetTokensAreAdminsAndNoRegistrationTakesTheLocalInstance
// attacks issue 11 #1 as it was found: a manager of project b asks for a
// token of the shared local fleet through b's path (403 now, 201 before);
// then, with an admin's token, hosts register as "vm" and under the
// server's own hostname (which the old id, sanitize(fleet+"-"+host), made
// "local-HOST", the local instance's id) and as "vm" in a project fleet.
// The local instance keeps its backend, its agent link and its running
// job; every registration is its own instance of its own fleet.
func TestSharedFleetTokensAreAdminsAndNoRegistrationTakesTheLocalInstance(t *testing.T) {
	rs := startRegServer(t, Options{FakeGPUs: "1xA100:40GB"})
	bob := rs.project("b", "bob")
	for _, c := range []struct{ method, path string }{
		{"POST", "/api/v1/projects/b/fleets/local/tokens"},
		{"DELETE", "/api/v1/projects/b/fleets/local/tokens/0123456789ab"},
	} {
		if got, se := rs.call(bob, c.method, c.path, nil, nil); got != http.StatusForbidden || !strings.Contains(se.Error(), "global admin") {
			t.Errorf("manager of b: %s %s = %d %q; want 403 naming global admins", c.method, c.path, got, se.Error())
		}
	}

	local := rs.waitInstances("main", "local", 1)[0]
	rs.must(http.StatusCreated, rs.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(sleepTask("on-local", "default", 1)), nil)
	waitRunStatus(rs.testServer, "on-local", "running")
	link := rs.agents.get(local.ID)

	var shared api.RegistrationToken
	rs.must(http.StatusCreated, rs.admin, "POST", "/api/v1/projects/b/fleets/local/tokens", nil, &shared)
	metal := rs.fleetWithToken(bob, "b", "metal")
	var outs []*testutil.SyncBuffer
	names := []string{"vm"}
	if local.Hostname != "vm" {
		names = append(names, local.Hostname)
	}
	for _, name := range names {
		_, _, out := rs.agent(shared.Token, "", name, "2xA100:40GB")
		outs = append(outs, out)
	}
	_, _, out := rs.agent(metal.Token, "", "vm", "2xA100:40GB")
	outs = append(outs, out)
	inLocal := rs.waitInstances("main", "local", 1+len(names), outs...)
	inMetal := rs.waitInstances("b", "metal", 1, outs...)

	ids := map[string]bool{}
	for _, in := range append(inLocal, inMetal...) {
		if ids[in.ID] {
			t.Errorf("two hosts share instance id %s", in.ID)
		}
		ids[in.ID] = true
		if in.ID == local.ID {
			if in.Backend != "local" || in.Resources.GPUs != 1 {
				t.Errorf("the local instance became %+v", in)
			}
			continue
		}
		if in.Backend != "registration" || !strings.HasPrefix(in.ID, "reg/") {
			t.Errorf("registered host %+v: want backend registration and a server-assigned reg/ id", in)
		}
	}
	if want := "reg/b/metal/vm"; !ids[want] {
		t.Errorf("the project fleet's vm is not %s: %v", want, ids)
	}
	if rs.agents.get(local.ID) != link {
		t.Error("a registration replaced the local instance's agent link")
	}
	if run := rs.getRun("on-local"); run.Status != "running" || run.Jobs[0].Instance != local.ID {
		t.Errorf("the local run is %s on %s; want running on %s", run.Status, run.Jobs[0].Instance, local.ID)
	}
}

// TestAnotherKeyCannotDisplaceARegisteredHost attacks issue 11 #8: a
// second agent holding the fleet's token but its own key registers under
// the same host name (and different GPUs, so a swap shows). It exits
// refused, naming the other key; an event says so; the first host stays
// connected with its 2 GPUs. The host itself restarts with its key and is
// the same instance. Revoking the token forgets the key, so a reinstalled
// machine (new key) takes the name back with a new token.
func TestAnotherKeyCannotDisplaceARegisteredHost(t *testing.T) {
	rs := startRegServer(t, Options{NoLocalAgent: true})
	tok := rs.fleetWithToken(rs.admin, "main", "metal")
	dir := t.TempDir()
	first, firstCmd, out := rs.agent(tok.Token, dir, "node", "2xA100:40GB")
	in := rs.waitInstances("main", "metal", 1, out)[0]
	link := rs.agents.get(in.ID)

	impostor := &testutil.RegisteringAgent{Bin: rs.bin, URL: rs.RegistrationURL(), Token: tok.Token, CA: rs.ca, FakeGPUs: "8xH100:80GB", Hostname: "NODE"}
	cmd, iout := impostor.Start(t)
	testutil.WaitRegistrationRefused(t, cmd, iout, 20*time.Second)
	if !strings.Contains(iout.String(), "another key") {
		t.Errorf("the impostor's refusal does not name the key:\n%s", iout)
	}
	after := rs.waitInstances("main", "metal", 1, out)[0]
	if after.Resources.GPUs != 2 || rs.agents.get(in.ID) != link {
		t.Errorf("after the impostor: %v GPUs, link replaced %v; want the first host's 2 GPUs on its own link", after.Resources.GPUs, rs.agents.get(in.ID) != link)
	}
	var evs []api.Event
	rs.must(http.StatusOK, rs.admin, "GET", "/api/v1/projects/main/events", nil, &evs)
	found := false
	for _, e := range evs {
		found = found || (e.Status == "registration_refused" && strings.Contains(e.Subject, in.ID))
	}
	if !found {
		t.Errorf("no registration_refused event for %s in %+v", in.ID, evs)
	}

	// The host restarts: same data dir, same key, same instance.
	if err := firstCmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = firstCmd.Wait() // killed: the exit status is the signal's
	_, out = first.Start(t)
	testutil.Eventually(t, 30*time.Second, func() error {
		if l := rs.agents.get(in.ID); l == nil || l == link {
			return testutil.Errorf("the restarted host did not come back on %s:\n%s", in.ID, out)
		}
		return nil
	})

	// Reinstalled: the manager revokes the token (forgetting its hosts'
	// keys); with a new token the new key binds the name.
	rs.must(http.StatusNoContent, rs.admin, "DELETE", "/api/v1/projects/main/fleets/metal/tokens/"+tok.ID, nil, nil)
	var tok2 api.RegistrationToken
	rs.must(http.StatusCreated, rs.admin, "POST", "/api/v1/projects/main/fleets/metal/tokens", nil, &tok2)
	_, _, out = rs.agent(tok2.Token, "", "node", "8xH100:80GB")
	testutil.Eventually(t, 30*time.Second, func() error {
		var f api.Fleet
		rs.must(http.StatusOK, rs.admin, "GET", "/api/v1/projects/main/fleets/metal", nil, &f)
		if len(f.Instances) != 1 {
			return testutil.Errorf("instances %+v", f.Instances)
		}
		if got := f.Instances[0]; got.ID != in.ID || got.Resources.GPUs != 8 || rs.agents.get(in.ID) == nil {
			return testutil.Errorf("instance %+v; want %s with the new machine's 8 GPUs, connected:\n%s", got, in.ID, out)
		}
		return nil
	})
}

// TestADeletedProjectsTokensNoLongerRegister attacks issue 11 #5: a
// project with a fleet and a connected registered host cannot be deleted
// while the fleet exists (409 saying what to do); deleting the fleet drops
// the host, which cannot come back, and its tokens; the project then goes,
// a token of it registers nothing, and the store checks clean, as
// `gpud admin check` does.
func TestADeletedProjectsTokensNoLongerRegister(t *testing.T) {
	rs := startRegServer(t, Options{NoLocalAgent: true})
	carol := rs.project("p", "carol")
	tok := rs.fleetWithToken(carol, "p", "metal")
	spare := rs.fleetWithToken(carol, "p", "spare")
	_, cmd, out := rs.agent(tok.Token, "", "node", "1xA100:40GB")
	rs.waitInstances("p", "metal", 1, out)

	got, se := rs.call(rs.admin, "DELETE", "/api/v1/projects/p", nil, nil)
	if got != http.StatusConflict || !strings.Contains(se.Error(), "gpud fleet delete") || !strings.Contains(se.Error(), "metal") {
		t.Fatalf("delete project with fleets: %d %q; want 409 naming the fleets and how to delete them", got, se.Error())
	}
	rs.must(http.StatusNoContent, carol, "DELETE", "/api/v1/projects/p/fleets/metal", nil, nil)
	testutil.WaitRegistrationRefused(t, cmd, out, 20*time.Second) // dropped, and its token is gone
	rs.must(http.StatusNoContent, carol, "DELETE", "/api/v1/projects/p/fleets/spare", nil, nil)
	rs.must(http.StatusNoContent, rs.admin, "DELETE", "/api/v1/projects/p", nil, nil)

	for _, token := range []string{tok.Token, spare.Token} {
		a := &testutil.RegisteringAgent{Bin: rs.bin, URL: rs.RegistrationURL(), Token: token, CA: rs.ca, FakeGPUs: "1xA100:40GB"}
		c, out := a.Start(t)
		testutil.WaitRegistrationRefused(t, c, out, 20*time.Second)
	}
	if n := len(rs.store.Instances().List()); n != 0 {
		t.Errorf("%d instances left after the project went", n)
	}
	probs, err := rs.store.Check(context.Background())
	if err != nil || len(probs) > 0 {
		t.Errorf("store check after deleting the project: %v %v", probs, err)
	}
}

// TestAProjectFleetCannotHideTheSharedOne attacks issue 11 #7: a fleet
// named like the shared local fleet is refused by name, and the project's
// path still names the shared fleet.
func TestAProjectFleetCannotHideTheSharedOne(t *testing.T) {
	ts := startServer(t, "")
	got, se := ts.call(ts.admin, "POST", "/api/v1/projects/main/fleets/apply", api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: local\nnodes: 0..1\n"}, nil)
	if got != http.StatusBadRequest || !strings.Contains(se.Error(), "shared") {
		t.Fatalf("apply fleet local: %d %q; want 400 saying the name is the shared fleet's", got, se.Error())
	}
	var f api.Fleet
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/fleets/local", nil, &f)
	if f.Project != "" {
		t.Errorf("projects/main/fleets/local is %+v; want the shared fleet", f)
	}
}
