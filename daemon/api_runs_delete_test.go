package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// jobLogBytes is how many bytes of job id's log the store holds.
func (ts *testServer) jobLogBytes(id string) int {
	ts.t.Helper()
	data, _, _, err := ts.store.Logs().Read(id, 0, 1<<20)
	if err != nil {
		return 0
	}
	return len(data)
}

// storeClean fails the test unless the store checks clean, as
// `gpud admin check` does: no record names one that is gone.
func (ts *testServer) storeClean(when string) {
	ts.t.Helper()
	probs, err := ts.store.Check(context.Background())
	if err != nil || len(probs) > 0 {
		ts.t.Errorf("store check %s: %v %v", when, probs, err)
	}
}

// Issue 19: `gpud fleet delete` refused for good ("fleet lab has jobs on
// …") once a host had run anything, because finished jobs still named
// it, and there was no way to delete a run. Now: a job that is not
// finished refuses the fleet's delete, naming its run and gpud stop; a
// running run refuses its own delete the same way; once stopped, the
// fleet goes (its finished jobs kept, unbound from the host that went,
// and the store checks clean); deleting a finished run takes its jobs and
// their logs. A member of another project cannot delete it.
func TestFinishedRunsNoLongerPinAFleetsHosts(t *testing.T) {
	rs := startRegServer(t, Options{NoLocalAgent: true})
	carol := rs.project("p", "carol")
	outsider := rs.user("outsider")
	rs.must(http.StatusCreated, rs.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "q"}, nil)
	rs.must(http.StatusOK, rs.admin, "PUT", "/api/v1/projects/q/members/outsider", api.SetMemberRequest{Role: api.RoleAdmin}, nil)
	tok := rs.fleetWithToken(carol, "p", "lab")
	_, _, out := rs.agent(tok.Token, "", "node", "1xA100:40GB")
	rs.waitInstances("p", "lab", 1, out)

	runs := "/api/v1/projects/p/runs/"
	getRun := func(name string) api.Run {
		t.Helper()
		var r api.Run
		rs.must(http.StatusOK, carol, "GET", runs+name, nil, &r)
		return r
	}
	waitStatus := func(name string, want ...string) api.Run {
		t.Helper()
		var r api.Run
		testutil.Eventually(t, 60*time.Second, func() error {
			r = getRun(name)
			for _, w := range want {
				if r.Status == w {
					return nil
				}
			}
			return testutil.Errorf("run %s is %s (%s), want %v\n%s", name, r.Status, r.Reason, want, out.String())
		})
		return r
	}
	task := func(name, cmd string) api.ApplyRunRequest {
		return yamlApply("type: task\nname: " + name + "\ncommands: [" + cmd + "]\nresources: {cpu: 0.., memory: 1MB.., disk: 1GB.., gpu: 1}\n")
	}
	rs.must(http.StatusCreated, carol, "POST", "/api/v1/projects/p/runs/apply", task("hello", "echo hello from lab"), nil)
	hello := waitStatus("hello", store.RunDone)
	if len(hello.Jobs) != 1 || !strings.Contains(hello.Jobs[0].Instance, "lab") {
		t.Fatalf("hello ran on %+v, want lab's host", hello.Jobs)
	}
	helloJob := hello.Jobs[0].ID
	testutil.Eventually(t, 20*time.Second, func() error {
		if rs.jobLogBytes(helloJob) == 0 {
			return testutil.Errorf("no log of %s yet", helloJob)
		}
		return nil
	})
	rs.must(http.StatusCreated, carol, "POST", "/api/v1/projects/p/runs/apply", task("long", "sleep 300"), nil)
	waitStatus("long", store.RunRunning)

	code, se := rs.call(carol, "DELETE", "/api/v1/projects/p/fleets/lab", nil, nil)
	if code != http.StatusConflict || !strings.Contains(se.Message, "long") || !strings.Contains(se.Message, "gpud stop") || strings.Contains(se.Message, "hello") {
		t.Fatalf("delete of a fleet running long: %d %q; want 409 naming long (not the finished hello) and gpud stop", code, se.Message)
	}
	code, se = rs.call(carol, "DELETE", runs+"long", nil, nil)
	if code != http.StatusConflict || !strings.Contains(se.Message, "gpud stop long") {
		t.Fatalf("delete of a running run: %d %q; want 409 saying gpud stop long", code, se.Message)
	}
	if code, se := rs.call(outsider, "DELETE", runs+"hello", nil, nil); code != http.StatusNotFound || se.Code != api.CodeProjectNotFound {
		t.Fatalf("an admin of another project deleting a run of p: %d %s, want 404 project_not_found", code, se.Code)
	}

	rs.must(http.StatusOK, carol, "POST", runs+"long/stop", api.StopRunRequest{Abort: true}, nil)
	waitStatus("long", store.RunTerminated, store.RunFailed)
	rs.must(http.StatusNoContent, carol, "DELETE", "/api/v1/projects/p/fleets/lab", nil, nil)
	if n := len(rs.store.Instances().List()); n != 0 {
		t.Errorf("%d instances left after the fleet went", n)
	}
	// The finished runs stay, as history, bound to no host.
	if j := getRun("hello").Jobs; len(j) != 1 || j[0].Instance != "" || j[0].Status != store.JobDone {
		t.Errorf("hello's jobs after its fleet went: %+v; want one done job bound to no host", j)
	}
	rs.storeClean("after the fleet went")

	rs.must(http.StatusNoContent, carol, "DELETE", runs+"hello", nil, nil)
	if code, _ := rs.call(carol, "GET", runs+"hello", nil, nil); code != http.StatusNotFound {
		t.Errorf("GET of a deleted run: %d, want 404", code)
	}
	if _, err := rs.store.Jobs().Get(helloJob); err == nil {
		t.Errorf("job %s outlived its run", helloJob)
	}
	if n := rs.jobLogBytes(helloJob); n != 0 {
		t.Errorf("the deleted run's log still holds %d bytes", n)
	}
	var events []api.Event
	rs.must(http.StatusOK, carol, "GET", "/api/v1/projects/p/events", nil, &events)
	if b, _ := json.Marshal(events); !strings.Contains(string(b), "deleted by carol") {
		t.Errorf("no event records who deleted hello: %s", b)
	}
	rs.storeClean("after the run went")
}

// Who may delete a run: any member, as for stop (a plain user deletes a
// colleague's finished task), except a service whose keys would go with
// it: those are its submitter's or a manager's to revoke, so a plain
// colleague gets 403 and the keys still work; the submitter's delete
// takes them, and a new run of the same name is not opened by them.
func TestDeletingARunTakesItsServiceKeysOnlyForThoseWhoMayRevokeThem(t *testing.T) {
	ts := startServer(t, "")
	owner, peer := ts.userMember("owner"), ts.userMember("peer")
	runs := "/api/v1/projects/main/runs/"
	ts.must(http.StatusCreated, owner, "POST", runs+"apply", yamlApply("type: task\nname: mine\ncommands: [echo hi]\nresources: {cpu: 0.., memory: 1MB.., disk: 1GB..}\n"), nil)
	ts.waitRun("mine", store.RunDone, "", 60*time.Second)
	ts.must(http.StatusNoContent, peer, "DELETE", runs+"mine", nil, nil)

	ts.must(http.StatusCreated, owner, "POST", runs+"apply", yamlApply(serviceConfig(t, "svc", freeLoopbackPort(t), "")), nil)
	var k api.ServiceKey
	ts.must(http.StatusCreated, owner, "POST", runs+"svc/keys", api.CreateServiceKeyRequest{Name: "ci"}, &k)
	ts.must(http.StatusOK, owner, "POST", runs+"svc/stop", api.StopRunRequest{Abort: true}, nil)
	testutil.Eventually(t, 60*time.Second, func() error {
		if r := ts.getRun("svc"); !finishedRun(r.Status) {
			return testutil.Errorf("svc is %s", r.Status)
		}
		return nil
	})
	if code, se := ts.call(peer, "DELETE", runs+"svc", nil, nil); code != http.StatusForbidden || !strings.Contains(se.Message, "owner") {
		t.Fatalf("a colleague deleting a service with keys: %d %q, want 403 naming its submitter", code, se.Message)
	}
	if _, ok := ts.serviceKeyValid(k.Key); !ok {
		t.Fatal("the refused delete revoked the key")
	}
	ts.must(http.StatusNoContent, owner, "DELETE", runs+"svc", nil, nil)
	if _, ok := ts.serviceKeyValid(k.Key); ok {
		t.Error("the key outlived its deleted service")
	}
	if names, err := ts.store.KV().List(context.Background(), serviceKeyNamesDir("main", "svc"), true); err == nil {
		t.Errorf("key names left: %v", names)
	}
	// A service of that name, applied again, is not opened by the key.
	ts.must(http.StatusCreated, peer, "POST", runs+"apply", yamlApply(serviceConfig(t, "svc", freeLoopbackPort(t), "")), nil)
	if ts.serviceKeyOpens(k.Key, "main", "svc") {
		t.Error("the deleted service's key opens a new service of its name")
	}
}

// Deleting a project (global admins only: a plain member, the project's
// own admin and an admin of another project get 403) refuses, naming
// each and the command that removes it, while it holds unfinished runs,
// fleets, volumes or backends; once they are gone, it takes its finished
// runs and their logs, members, queues, secrets and gateways, and a new
// project of the same name starts empty.
func TestProjectDeleteNamesWhatKeepsIt(t *testing.T) {
	ts := startServer(t, "")
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "lab"}, nil)
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	toks := map[string]string{}
	for user, m := range map[string][2]string{"plain": {"lab", "user"}, "labadmin": {"lab", "admin"}, "otheradmin": {"other", "admin"}} {
		toks[user] = ts.user(user)
		ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/"+m[0]+"/members/"+user, api.SetMemberRequest{Role: m[1]}, nil)
	}
	for user, tok := range toks {
		if code, se := ts.call(tok, "DELETE", "/api/v1/projects/lab", nil, nil); code != http.StatusForbidden {
			t.Errorf("%s deleting project lab: %d %s, want 403", user, code, se.Message)
		}
	}

	p := "/api/v1/projects/lab"
	ts.must(http.StatusCreated, toks["plain"], "POST", p+"/runs/apply", yamlApply("type: task\nname: done1\ncommands: [echo kept until the project goes]\nresources: {cpu: 0.., memory: 1MB.., disk: 1GB..}\n"), nil)
	ts.must(http.StatusCreated, toks["plain"], "POST", p+"/runs/apply", yamlApply("type: task\nname: busy\ncommands: [sleep 300]\nresources: {cpu: 0.., memory: 1MB.., disk: 1GB..}\n"), nil)
	var done api.Run
	testutil.Eventually(t, 60*time.Second, func() error {
		ts.must(http.StatusOK, ts.admin, "GET", p+"/runs/done1", nil, &done)
		if done.Status != store.RunDone || len(done.Jobs) != 1 || ts.jobLogBytes(done.Jobs[0].ID) == 0 {
			return testutil.Errorf("done1 is %s with jobs %+v", done.Status, done.Jobs)
		}
		return nil
	})
	ts.must(http.StatusOK, ts.admin, "POST", p+"/fleets/apply", api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: f1\nnodes: 0..1\n"}, nil)
	ts.applyVolume(ts.admin, "lab", "type: volume\nname: data\nbackend: local\n")
	spec, _ := json.Marshal(backendSpec{Type: "kubernetes", Source: backendSourceAPI})
	if _, err := ts.store.Apply(context.Background(), store.Put(store.Record{Kind: store.KindBackend, ID: backendID("lab", "k8s"), Project: "lab", Name: "k8s", Spec: spec})); err != nil {
		t.Fatal(err)
	}
	ts.must(http.StatusOK, ts.admin, "PUT", p+"/secrets/TOKEN", api.SetSecretRequest{Value: "s3cret"}, nil)
	ts.must(http.StatusOK, ts.admin, "POST", p+"/queues/apply", api.ApplyRequest{ConfigurationYAML: "type: queue\nname: q1\n"}, nil)

	code, se := ts.call(ts.admin, "DELETE", p, nil, nil)
	for _, want := range []string{"busy", "gpud stop", "f1", "gpud fleet delete", "data", "gpud volume delete", "k8s", "gpud backend delete"} {
		if code != http.StatusConflict || !strings.Contains(se.Message, want) {
			t.Errorf("delete of a project with a run, fleet, volume and backend: %d %q; want 409 saying %q", code, se.Message, want)
		}
	}
	if strings.Contains(se.Message, "done1") {
		t.Errorf("the refusal names the finished run done1: %q", se.Message)
	}
	ts.must(http.StatusOK, ts.admin, "POST", p+"/runs/busy/stop", api.StopRunRequest{Abort: true}, nil)
	ts.must(http.StatusNoContent, ts.admin, "DELETE", p+"/fleets/f1", nil, nil)
	ts.must(http.StatusNoContent, ts.admin, "DELETE", p+"/volumes/data", nil, nil)
	ts.must(http.StatusNoContent, ts.admin, "DELETE", p+"/backends/k8s", nil, nil)
	testutil.Eventually(t, 60*time.Second, func() error {
		code, se := ts.call(ts.admin, "DELETE", p, nil, nil)
		if code != http.StatusNoContent {
			return testutil.Errorf("delete of the emptied project: %d %s", code, se.Message)
		}
		return nil
	})
	if n := ts.jobLogBytes(done.Jobs[0].ID); n != 0 {
		t.Errorf("done1's log outlived its project: %d bytes", n)
	}
	for _, k := range []store.Kind{store.KindRun, store.KindJob, store.KindMember, store.KindQueue, store.KindSecret, store.KindBackend} {
		if recs := ts.store.Collection(k).ByProject("lab"); len(recs) > 0 {
			t.Errorf("%d %s of lab outlived it", len(recs), k)
		}
	}
	ts.storeClean("after the project went")
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "lab"}, nil)
	var runs []api.Run
	ts.must(http.StatusOK, ts.admin, "GET", p+"/runs?all=true", nil, &runs)
	var members []api.Member
	ts.must(http.StatusOK, ts.admin, "GET", p+"/members", nil, &members)
	if len(runs) != 0 || len(members) != 1 {
		t.Errorf("the new lab has runs %+v and members %+v; want none and its creator", runs, members)
	}
	if code, _ := ts.call(ts.admin, "GET", p+"/secrets/TOKEN", nil, nil); code != http.StatusNotFound {
		t.Errorf("the old lab's secret in the new one: %d", code)
	}
}
