package daemon

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// applyVolume applies a `type: volume` as token's user and returns it.
func (ts *testServer) applyVolume(token, project, yaml string) api.Volume {
	ts.t.Helper()
	var v api.Volume
	ts.must(http.StatusOK, token, "POST", "/api/v1/projects/"+project+"/volumes/apply", api.ApplyRequest{ConfigurationYAML: yaml, Filename: "volume.yml"}, &v)
	return v
}

// volumes lists project's volumes.
func (ts *testServer) volumes(project string) []api.Volume {
	ts.t.Helper()
	var vs []api.Volume
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/"+project+"/volumes", nil, &vs)
	return vs
}

// volumeNamed is project's volume of that name, or false.
func (ts *testServer) volumeNamed(project, name string) (api.Volume, bool) {
	ts.t.Helper()
	i := slices.IndexFunc(ts.volumes(project), func(v api.Volume) bool { return v.Name == name })
	if i < 0 {
		return api.Volume{}, false
	}
	return ts.volumes(project)[i], true
}

// volumeID is the id (the agent's directory name) of project's volume.
func (ts *testServer) volumeID(project, name string) string {
	ts.t.Helper()
	rec, err := ts.store.Volumes().Get(volumeRecordID(project, name))
	if err != nil {
		ts.t.Fatalf("volume %s/%s: %v", project, name, err)
	}
	st, err := volumeStateOf(rec)
	if err != nil {
		ts.t.Fatal(err)
	}
	return st.VolumeID
}

// volumeDir is the local agent's directory of project's volume name.
func (ts *testServer) volumeDir(project, name string) string {
	ts.t.Helper()
	return filepath.Join(ts.opts.DataDir, "agent", "volumes", project, ts.volumeID(project, name))
}

// A volume applied once is made on the host of the first job that uses
// it, keeps what that job wrote, and mounts it into the next run at its
// path; a name with ${{ dstack.node_rank }} names one volume per node.
func TestManagedVolumeSharesDataBetweenRunsOnDocker(t *testing.T) {
	ts := startDockerServer(t)
	alice := ts.userMember("alice")
	v := ts.applyVolume(alice, "main", "type: volume\nname: cache\nbackend: local\n")
	if v.Status != volumeSubmitted || v.Instance != "" || v.Backend != "local" {
		t.Fatalf("a new volume: %+v, want submitted on no host, backend local", v)
	}
	vol := "volumes:\n  - name: cache\n    path: /data\n"
	var plan api.RunPlan
	ts.must(http.StatusOK, alice, "POST", "/api/v1/projects/main/runs/plan", yamlApply("type: task\nname: vw\n"+vol+"commands: [true]\n"), &plan)
	if !slices.ContainsFunc(plan.Notes, func(n string) bool { return strings.Contains(n, "volume cache is on no host yet") }) {
		t.Errorf("the plan does not say where the volume will live: %q", plan.Notes)
	}
	ts.runOutput("vw", "type: task\nname: vw\n"+vol+"commands:\n  - echo kept-by-the-volume > /data/f\n", "done")
	v, _ = ts.volumeNamed("main", "cache")
	if v.Status != volumeActive || v.Instance == "" || v.Used <= 0 || v.LastUsed.IsZero() {
		t.Fatalf("after a run used it the volume is %+v, want active on a host with bytes used", v)
	}
	b, err := os.ReadFile(filepath.Join(ts.volumeDir("main", "cache"), "f"))
	if err != nil || strings.TrimSpace(string(b)) != "kept-by-the-volume" {
		t.Fatalf("the agent's volume directory lacks the file: %q %v", b, err)
	}
	ts.must(http.StatusOK, alice, "POST", "/api/v1/projects/main/runs/plan", yamlApply("type: task\nname: vr\n"+vol+"commands: [true]\n"), &plan)
	if !slices.ContainsFunc(plan.Notes, func(n string) bool { return strings.Contains(n, "volume cache lives on host "+v.Instance) }) {
		t.Errorf("the plan does not say the run follows the volume to its host: %q", plan.Notes)
	}
	_, out := ts.runOutput("vr", "type: task\nname: vr\n"+vol+"commands:\n  - cat /data/f\n", "done")
	if !slices.Contains(out, "kept-by-the-volume") {
		t.Fatalf("the second run did not read what the first wrote: %q", out)
	}
	// One volume per node, by name interpolation.
	ts.applyVolume(alice, "main", "type: volume\nname: shard-0\nbackend: local\n")
	ts.runOutput("vn", "type: task\nname: vn\nvolumes:\n  - name: shard-${{ dstack.node_rank }}\n    path: /shard\ncommands:\n  - echo node-0 > /shard/f\n", "done")
	if b, err := os.ReadFile(filepath.Join(ts.volumeDir("main", "shard-0"), "f")); err != nil || strings.TrimSpace(string(b)) != "node-0" {
		t.Fatalf("shard-${{ dstack.node_rank }} did not mount shard-0: %q %v", b, err)
	}
}

// A volume an active run uses is not deleted: 409 naming the run, and
// its auto_cleanup_duration does not run out while the run lasts; once
// the run has ended it is deleted, with its directory on the host.
func TestManagedVolumeInUseRefusesDeletion(t *testing.T) {
	ts := startContainerServer(t, Options{ResyncInterval: 300 * time.Millisecond})
	ts.applyVolume(ts.admin, "main", "type: volume\nname: busy\nbackend: local\nauto_cleanup_duration: 1s\n")
	ts.submit("type: task\nname: holder\nvolumes:\n  - name: busy\n    path: /data\ncommands:\n  - touch /data/x\n  - sleep 300\n")
	ts.waitRun("holder", store.RunRunning, "", 90*time.Second)
	dir := ts.volumeDir("main", "busy")
	testutil.Eventually(t, 30*time.Second, func() error {
		_, err := os.Stat(filepath.Join(dir, "x"))
		return err
	})
	// The cleanup loop sees it in use (it moves its last use on) past
	// its 1s, and keeps it.
	v, _ := ts.volumeNamed("main", "busy")
	first := v.LastUsed
	testutil.Eventually(t, 30*time.Second, func() error {
		v, ok := ts.volumeNamed("main", "busy")
		if !ok {
			t.Fatal("the cleanup deleted a volume a running job uses")
		}
		if !v.LastUsed.After(first.Add(1500 * time.Millisecond)) {
			return fmt.Errorf("last use %v, want it moved on past %v", v.LastUsed, first.Add(1500*time.Millisecond))
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(dir, "x")); err != nil {
		t.Fatalf("the volume in use lost its data: %v", err)
	}
	status, se := ts.call(ts.admin, "DELETE", "/api/v1/projects/main/volumes/busy", nil, nil)
	if status != http.StatusConflict || !strings.Contains(se.Message, "holder") {
		t.Fatalf("delete of a volume in use: %d %q, want 409 naming the run holder", status, se.Message)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err != nil {
		t.Fatalf("a refused delete removed data: %v", err)
	}
	// Off again, so that the delete below is the user's, not the loop's.
	ts.applyVolume(ts.admin, "main", "type: volume\nname: busy\nbackend: local\nauto_cleanup_duration: off\n")
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/holder/stop", api.StopRunRequest{Abort: true}, nil)
	ts.waitRunEnd("holder", 60*time.Second)
	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/main/volumes/busy", nil, nil)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the volume's directory is still there after delete: %v", err)
	}
	if _, ok := ts.volumeNamed("main", "busy"); ok {
		t.Fatal("the volume is still listed after delete")
	}
	// A run naming it now is refused at plan time.
	ts.refusedAt("type: task\nvolumes:\n  - name: busy\n    path: /data\ncommands: [true]\n", "volumes[0].name", "does not exist", "gpud apply")
}

// A volume unused for its auto_cleanup_duration is deleted by the server,
// data and record, with an event; one without it stays.
func TestManagedVolumeUnusedForItsAutoCleanupDurationIsDeleted(t *testing.T) {
	ts := startContainerServer(t, Options{ResyncInterval: 500 * time.Millisecond})
	ts.applyVolume(ts.admin, "main", "type: volume\nname: scratch\nbackend: local\nauto_cleanup_duration: 3s\n")
	ts.applyVolume(ts.admin, "main", "type: volume\nname: keep\nbackend: local\n")
	ts.runOutput("ac", "type: task\nname: ac\nvolumes:\n  - name: scratch\n    path: /s\n  - name: keep\n    path: /k\ncommands:\n  - echo x > /s/f\n  - echo y > /k/f\n", "done")
	dir, kept := ts.volumeDir("main", "scratch"), ts.volumeDir("main", "keep")
	if _, err := os.Stat(filepath.Join(dir, "f")); err != nil {
		t.Fatalf("the volume was not written: %v", err)
	}
	testutil.Eventually(t, 60*time.Second, func() error {
		if _, ok := ts.volumeNamed("main", "scratch"); ok {
			return fmt.Errorf("volume scratch is still there")
		}
		return nil
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the cleaned-up volume's directory is still there: %v", err)
	}
	var es []api.Event
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/events", nil, &es)
	if !slices.ContainsFunc(es, func(e api.Event) bool {
		return e.Status == "deleted" && strings.Contains(e.Reason, "auto_cleanup_duration")
	}) {
		t.Errorf("no event says the volume was deleted for its auto_cleanup_duration: %+v", es)
	}
	if _, ok := ts.volumeNamed("main", "keep"); !ok {
		t.Fatal("a volume without auto_cleanup_duration was deleted")
	}
	if _, err := os.Stat(filepath.Join(kept, "f")); err != nil {
		t.Fatalf("a volume without auto_cleanup_duration lost its data: %v", err)
	}
}

// A volume's size keeps its first job off hosts with less free disk: the
// job waits, saying so.
func TestManagedVolumeSizeKeepsItOffHostsWithLessFreeDisk(t *testing.T) {
	ts := startDockerServer(t)
	ts.applyVolume(ts.admin, "main", "type: volume\nname: huge\nbackend: local\nsize: 900TB\n")
	ts.submit("type: task\nname: big\nvolumes:\n  - name: huge\n    path: /data\ncommands: [true]\n")
	testutil.Eventually(t, 30*time.Second, func() error {
		r := ts.getRun("big")
		if finishedRun(r.Status) || r.Status == store.RunRunning || !strings.Contains(r.WhyPending, "900TB of free disk") || !strings.Contains(r.WhyPending, "volume huge") {
			return fmt.Errorf("run big is %s (%s), want it waiting for 900TB of free disk for volume huge", r.Status, r.WhyPending)
		}
		return nil
	})
	if v, _ := ts.volumeNamed("main", "huge"); v.Instance != "" {
		t.Fatalf("the volume was bound to %s, whose disk is smaller than its size", v.Instance)
	}
}

// Attacks through volume names and other projects' volumes are refused
// with a clear error, and nothing is mounted or deleted.
func TestManagedVolumeAttacksAreRefused(t *testing.T) {
	ts := startDockerServer(t)
	alice := ts.userMember("alice")
	bob := ts.userMember("bob")
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "other"}, nil)
	ts.applyVolume(ts.admin, "other", "type: volume\nname: secret\nbackend: local\n")
	// Names that would climb out are not names.
	for _, name := range []string{"../etc", "a/b", ".."} {
		status, se := ts.call(alice, "POST", "/api/v1/projects/main/volumes/apply", api.ApplyRequest{ConfigurationYAML: "type: volume\nname: " + name + "\nbackend: local\n"}, nil)
		if status/100 != 4 {
			t.Errorf("apply of volume %q: %d, want a 4xx", name, status)
		}
		t.Logf("volume %q: %d %s %q", name, status, se.Message, se.Errors)
	}
	status, se := ts.call(alice, "POST", "/api/v1/projects/main/runs/apply", yamlApply("type: task\ncommands: [true]\nvolumes:\n  - name: ../secret\n    path: /data\n"), nil)
	if status/100 != 4 || !strings.Contains(strings.Join(se.Errors, " ")+se.Message, "volumes[0]") {
		t.Errorf("a run naming ../secret: %d %q %q, want a 4xx naming volumes[0]", status, se.Message, se.Errors)
	}
	// Another project's volume does not exist here, and cannot be
	// listed, used or deleted from here.
	ts.refusedAt("type: task\nvolumes:\n  - name: secret\n    path: /data\ncommands: [true]\n", "volumes[0].name", `volume "secret" does not exist in project "main"`)
	if st, _ := ts.call(alice, "DELETE", "/api/v1/projects/main/volumes/secret", nil, nil); st != http.StatusNotFound {
		t.Errorf("delete of another project's volume through one's own: %d, want 404", st)
	}
	if st, _ := ts.call(alice, "DELETE", "/api/v1/projects/other/volumes/secret", nil, nil); st != http.StatusNotFound {
		t.Errorf("delete of another project's volume by a non-member: %d, want 404", st)
	}
	if st, _ := ts.call(alice, "GET", "/api/v1/projects/other/volumes", nil, nil); st != http.StatusNotFound {
		t.Errorf("list of another project's volumes by a non-member: %d, want 404", st)
	}
	if _, ok := ts.volumeNamed("other", "secret"); !ok {
		t.Fatal("the other project's volume is gone")
	}
	// A member's volume is theirs or a manager's to delete or change.
	ts.applyVolume(alice, "main", "type: volume\nname: mine\nbackend: local\n")
	if st, _ := ts.call(bob, "DELETE", "/api/v1/projects/main/volumes/mine", nil, nil); st != http.StatusForbidden {
		t.Errorf("delete of alice's volume by bob: %d, want 403", st)
	}
	if st, _ := ts.call(bob, "POST", "/api/v1/projects/main/volumes/apply", api.ApplyRequest{ConfigurationYAML: "type: volume\nname: mine\nbackend: local\nauto_cleanup_duration: 1s\n"}, nil); st != http.StatusForbidden {
		t.Errorf("re-apply of alice's volume by bob: %d, want 403", st)
	}
	ts.must(http.StatusNoContent, alice, "DELETE", "/api/v1/projects/main/volumes/mine", nil, nil)
	// A backend the project does not have is refused by name (a project
	// with a Kubernetes backend: volumes_backend_test.go).
	status, se = ts.call(alice, "POST", "/api/v1/projects/main/volumes/apply", api.ApplyRequest{ConfigurationYAML: "type: volume\nname: k\nbackend: kubernetes\nsize: 10GB\n", Filename: "k.yml"}, nil)
	if status != http.StatusBadRequest || se.Field != "configuration.backend" || !strings.Contains(se.Message, `no backend "kubernetes" in project "main"`) {
		t.Errorf("a kubernetes volume: %d %+v, want 400 naming the backend", status, se)
	}
}

// With two Docker hosts, a volume of backend registered is made on the
// registered host, not the server's, and the next run that uses it
// follows it there, whatever host it would otherwise take.
func TestManagedVolumeKeepsItsRunsOnItsHost(t *testing.T) {
	bin := staticGpud(t)
	ts := startContainerServer(t, Options{RegistrationListen: "127.0.0.1:0"})
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply",
		api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: far\nnodes: 0..1\n"}, nil)
	var tok api.RegistrationToken
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/fleets/far/tokens", nil, &tok)
	agentDir := t.TempDir()
	_, out := testutil.RegisteringAgent{Bin: bin, URL: ts.RegistrationURL(), Token: tok.Token, CA: filepath.Join(ts.opts.DataDir, RegistrationCAFile),
		FakeGPUs: "1xH100:80GB", Hostname: "far-host", DataDir: agentDir,
		Args: []string{"--agent-id", "far-" + randomWord(t), "--runtime", "docker"}}.Start(t)
	testutil.Eventually(t, 60*time.Second, func() error {
		for _, h := range ts.candidateHosts("main") {
			if h.fleetName == "far" && h.runtime == "docker" {
				return nil
			}
		}
		return fmt.Errorf("the far host has not registered with Docker; its output:\n%s", out)
	})
	v := ts.applyVolume(ts.admin, "main", "type: volume\nname: remote-data\nbackend: registered\n")
	vol := "volumes:\n  - name: remote-data\n    path: /data\n"
	run, _ := ts.runOutput("rw", "type: task\nname: rw\n"+vol+"commands:\n  - echo on-the-far-host > /data/f\n", "done")
	v, _ = ts.volumeNamed("main", "remote-data")
	if v.Instance == "" || len(run.Jobs) != 1 || run.Jobs[0].Instance != v.Instance || !strings.Contains(v.Instance, "far") {
		t.Fatalf("volume %+v, run on %+v: want both on the registered host", v, run.Jobs)
	}
	id := ts.volumeID("main", "remote-data")
	if b, err := os.ReadFile(filepath.Join(agentDir, "volumes", "main", id, "f")); err != nil || strings.TrimSpace(string(b)) != "on-the-far-host" {
		t.Fatalf("the registered agent's volume directory lacks the file: %q %v", b, err)
	}
	// Two readers with no placement of their own: both follow the volume.
	for _, name := range []string{"rr1", "rr2"} {
		run, out := ts.runOutput(name, "type: task\nname: "+name+"\n"+vol+"commands:\n  - cat /data/f\n", "done")
		if len(run.Jobs) != 1 || run.Jobs[0].Instance != v.Instance || !slices.Contains(out, "on-the-far-host") {
			t.Fatalf("run %s on %+v printed %q: want it on the volume's host %s, reading what rw wrote", name, run.Jobs, out, v.Instance)
		}
	}
	// Deleting it asks that host's agent to remove the directory.
	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/main/volumes/remote-data", nil, nil)
	if _, err := os.Stat(filepath.Join(agentDir, "volumes", "main", id)); !os.IsNotExist(err) {
		t.Fatalf("the registered host kept the deleted volume's directory: %v", err)
	}
}

// The scheduler binds a volume on no host to the node of the first
// placement that uses it, in the cycle's write; a gang placed in the same
// cycle on another node is held back (its next cycle's selector keeps it
// on the volume's host), and so is a gang whose own tasks would split it.
func TestManagedVolumeBindsOnceAndHoldsBackWhatWouldSplitIt(t *testing.T) {
	ts := startServer(t, "")
	ts.applyVolume(ts.admin, "main", "type: volume\nname: one\nbackend: local\n")
	ref := api.ManagedVolumeRef{Project: "main", ID: ts.volumeID("main", "one"), Name: "one"}
	now := time.Now().UTC()
	muts, held := ts.bindVolumes([]volumeBind{
		{job: "a", node: "n1", refs: []api.ManagedVolumeRef{ref}},
		{job: "b", node: "n2", refs: []api.ManagedVolumeRef{ref}},
		{job: "c", node: "n1", refs: []api.ManagedVolumeRef{ref}},
		{job: "g", node: "n1", refs: []api.ManagedVolumeRef{ref}},
		{job: "g", node: "n2", refs: []api.ManagedVolumeRef{ref}},
	}, now)
	if held["a"] || !held["b"] || held["c"] || !held["g"] {
		t.Fatalf("held back %v, want b (another node) and g (split across two), not a and c", held)
	}
	if len(muts) != 2 { // the volume's update and its event
		t.Fatalf("%d mutations, want the volume's one update and its event", len(muts))
	}
	if _, err := ts.store.Apply(t.Context(), muts...); err != nil {
		t.Fatal(err)
	}
	rec, err := ts.store.Volumes().Get(volumeRecordID("main", "one"))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := volumeStateOf(rec)
	if rec.Status != volumeActive || st.Instance != "n1" {
		t.Fatalf("volume %s on %q, want active on n1", rec.Status, st.Instance)
	}
	// Bound: only n1 takes it from now on; a deleted or re-created
	// volume (another id) is held back everywhere.
	if _, held := ts.bindVolumes([]volumeBind{{job: "d", node: "n2", refs: []api.ManagedVolumeRef{ref}}}, now); !held["d"] {
		t.Fatal("a placement on another node than the volume's was not held back")
	}
	stale := ref
	stale.ID = "00000000deadbeef"
	if _, held := ts.bindVolumes([]volumeBind{{job: "e", node: "n1", refs: []api.ManagedVolumeRef{stale}}}, now); !held["e"] {
		t.Fatal("a placement of a volume that is gone was not held back")
	}
}

// A project that still has volumes is not deleted: their data lives on
// hosts, which deleting each volume cleans up.
func TestProjectWithVolumesIsNotDeleted(t *testing.T) {
	ts := startServer(t, "")
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects", api.CreateProjectRequest{Name: "lab"}, nil)
	ts.applyVolume(ts.admin, "lab", "type: volume\nname: data\nbackend: local\n")
	status, se := ts.call(ts.admin, "DELETE", "/api/v1/projects/lab", nil, nil)
	if status != http.StatusConflict || !strings.Contains(se.Message, "data") || !strings.Contains(se.Message, "gpud volume delete") {
		t.Fatalf("delete of a project with a volume: %d %q, want 409 naming the volume and gpud volume delete", status, se.Message)
	}
	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/lab/volumes/data", nil, nil)
	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/lab", nil, nil)
}

// Where every host runs jobs as processes, a volume cannot be mounted at
// its path: the plan refuses it by that field, with what to do instead.
func TestManagedVolumeOnProcessOnlyHostsIsRefusedByItsPath(t *testing.T) {
	ts := startServer(t, "")
	ts.applyVolume(ts.admin, "main", "type: volume\nname: pv\nbackend: local\n")
	ts.refusedAt("type: task\nvolumes:\n  - name: pv\n    path: /data\ncommands: [true]\n", "volumes[0].path", "only Docker can mount", "instance volume")
	if v, _ := ts.volumeNamed("main", "pv"); v.Instance != "" {
		t.Fatalf("a refused run bound the volume to %s", v.Instance)
	}
}

// A two-node task with a volume per node (shard-${{ dstack.node_rank }})
// on two Docker hosts: each volume is made on its node's host, and when
// the volumes live the other way round from how the scheduler would place
// the nodes (as two earlier runs could have left them; the test swaps
// them), each node still lands on its own volume's host and reads it.
func TestManagedVolumePerNodeFollowsEachNodeToItsHost(t *testing.T) {
	bin := staticGpud(t)
	ts := startContainerServer(t, Options{RegistrationListen: "127.0.0.1:0"})
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply",
		api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: pair\nnodes: 0..2\n"}, nil)
	dirs := map[string]string{} // hostname -> agent data dir
	for _, h := range []string{"pair-a", "pair-b"} {
		var tok api.RegistrationToken
		ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/fleets/pair/tokens", nil, &tok)
		dirs[h] = t.TempDir()
		testutil.RegisteringAgent{Bin: bin, URL: ts.RegistrationURL(), Token: tok.Token, CA: filepath.Join(ts.opts.DataDir, RegistrationCAFile),
			FakeGPUs: "1xH100:80GB", Hostname: h, DataDir: dirs[h],
			Args: []string{"--agent-id", h + "-" + randomWord(t), "--runtime", "docker"}}.Start(t)
	}
	hostDir := map[string]string{} // instance -> agent data dir
	testutil.Eventually(t, 60*time.Second, func() error {
		var seen []string
		for _, h := range ts.candidateHosts("main") {
			seen = append(seen, h.id+" "+h.info.Hostname+" "+h.runtime)
			for name, d := range dirs {
				if h.fleetName == "pair" && strings.Contains(h.id, name) && h.runtime == "docker" {
					hostDir[h.id] = d
				}
			}
		}
		if len(hostDir) != 2 {
			return fmt.Errorf("%d of the 2 pair hosts registered with Docker: %q", len(hostDir), seen)
		}
		return nil
	})
	for _, n := range []string{"shard-0", "shard-1"} {
		ts.applyVolume(ts.admin, "main", "type: volume\nname: "+n+"\nbackend: registered\n")
	}
	task := func(name, cmd string) string {
		return "type: task\nname: " + name + "\nnodes: 2\nresources:\n  gpu: 1\nvolumes:\n  - name: shard-${{ dstack.node_rank }}\n    path: /shard\ncommands:\n  - " + cmd + "\n"
	}
	run, _ := ts.runOutput("pw", task("pw", "echo rank-$DSTACK_NODE_RANK > /shard/f"), "done")
	onHost := func(run api.Run, rank int) string {
		for _, j := range run.Jobs {
			if j.NodeRank == rank {
				return j.Instance
			}
		}
		t.Fatalf("run %s has no node %d: %+v", run.Name, rank, run.Jobs)
		return ""
	}
	h0, h1 := onHost(run, 0), onHost(run, 1)
	for rank, h := range []string{h0, h1} {
		name := fmt.Sprintf("shard-%d", rank)
		v, _ := ts.volumeNamed("main", name)
		if v.Instance != h {
			t.Fatalf("volume %s lives on %q, want %q, the host of node %d", name, v.Instance, h, rank)
		}
	}
	if h0 == h1 {
		t.Fatalf("both nodes ran on %s", h0)
	}
	// Swap where the volumes live, data with them.
	for rank, to := range []string{h1, h0} {
		id := volumeRecordID("main", fmt.Sprintf("shard-%d", rank))
		rec, err := ts.store.Volumes().Get(id)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := volumeStateOf(rec)
		from := st.Instance
		st.Instance = to
		rec.Spec = encodeSpec(st)
		if _, err := ts.store.Apply(t.Context(), store.Update(rec)); err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(hostDir[from], "volumes", "main", st.VolumeID)
		dst := filepath.Join(hostDir[to], "volumes", "main", st.VolumeID)
		if err := os.MkdirAll(filepath.Dir(dst), 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(src, dst); err != nil { // each id lives on one host: dst is free
			t.Fatal(err)
		}
	}
	run, out := ts.runOutput("pr", task("pr", "echo node-$DSTACK_NODE_RANK-reads-$(cat /shard/f)"), "done")
	if onHost(run, 0) != h1 || onHost(run, 1) != h0 {
		t.Fatalf("node 0 ran on %s and node 1 on %s, want each on its volume's host (%s, %s)", onHost(run, 0), onHost(run, 1), h1, h0)
	}
	for _, want := range []string{"node-0-reads-rank-0", "node-1-reads-rank-1"} {
		if !slices.Contains(out, want) {
			t.Fatalf("the nodes printed %q, want %q", out, want)
		}
	}
}
