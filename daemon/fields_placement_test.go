package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	agentclient "gpud.dev/gpud/agent/client"
	agentserver "gpud.dev/gpud/agent/server"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/store"
)

// placementServer is a test server with two hosts: the local fleet's
// (fake 2×H100 80GB) and a host of project fleet "lab" (fake 2×MI300X,
// hostname lab-host), a real agent opened in this process and linked as
// a registered host is. Each host's process jobs work under a root of
// its own, so a job's `pwd` says which host it ran on.
type placementServer struct {
	*testServer
	local, lab string // instance ids
	labRoot    string // the lab host's process work root
}

func startPlacementServer(t *testing.T) *placementServer {
	t.Helper()
	ts := startServer(t, "2xH100:80GB")
	ps := &placementServer{testServer: ts, local: ts.hosts.local.instance}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply",
		api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: lab\nnodes: 0..4\n"}, nil)
	ps.lab, ps.labRoot = addHost(t, ts, "main/lab", "lab-host", "2xMI300X")
	return ps
}

// addHost opens an agent with fake gpus in this process, serves its API
// on a unix socket and links it as a registered host of fleet (what a
// registration tunnel does), reporting hostname. It returns the instance
// id and the host's process work root.
func addHost(t *testing.T, ts *testServer, fleet, hostname, gpus string) (string, string) {
	t.Helper()
	ctx := context.Background()
	token, err := store.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp("/var/tmp", "gpud-test-"+hostname+"-")
	if err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "gpl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := ts.hosts.localHostConfig(t.TempDir(), "agent-"+hostname, token)
	cfg.FakeGPUs, cfg.ProcessWorkRoot = gpus, root
	h, err := agentserver.OpenHost(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- h.Serve(sctx, ln) }()
	t.Cleanup(func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		for _, j := range h.Agent.List() {
			_, _ = h.Agent.Stop(wctx, j.ID)
			_, _ = h.Agent.Wait(wctx, j.ID)
		}
		stop()
		if err := errors.Join(<-served, h.Close(), os.RemoveAll(root), os.RemoveAll(sockDir)); err != nil {
			t.Logf("close host %s: %v", hostname, err)
		}
	})
	cl, err := agentclient.New("unix://"+sock, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := h.Agent.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info.Hostname = hostname
	id := "reg/" + hostname
	if err := ts.hosts.registerInstance(ctx, fleet, id, "registration", info, cl); err != nil {
		t.Fatal(err)
	}
	kick(ts.schedWake)
	return id, root
}

// job is a short task: it prints where it runs and what it got.
func job(name, extra string) string {
	return fmt.Sprintf("type: task\nname: %s\ncommands:\n  - echo \"pwd=$(pwd)\"\n  - echo \"gpus=$CUDA_VISIBLE_DEVICES num=$DSTACK_GPUS_NUM share=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE limit=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT\"\n"+
		"  - echo \"arch=$(uname -m)\"\n%s", name, extra)
}

// res is a resources block that fits the test hosts, plus more lines.
func res(more ...string) string {
	return "resources:\n  cpu: 0..\n  memory: 1MB..\n" + strings.Join(more, "")
}

// ran waits for run name to finish done and returns the instance its job
// ran on and the values it printed (pwd, gpus, ...).
func (ps *placementServer) ran(name string) (string, map[string]string) {
	ps.t.Helper()
	run := ps.waitRunEnd(name, 60*time.Second)
	if run.Status != "done" || len(run.Jobs) == 0 {
		ps.t.Fatalf("run %s: %s (%s), jobs %+v; logs %q", name, run.Status, run.Reason, run.Jobs, ps.runLogs(name))
	}
	var lines []string
	testutil.Eventually(ps.t, 20*time.Second, func() error {
		lines = ps.runLogs(name)
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "arch=") }) {
			return fmt.Errorf("run %s logs %q", name, lines)
		}
		return nil
	})
	vals := map[string]string{}
	for _, l := range lines {
		for _, f := range strings.Fields(l) {
			if k, v, ok := strings.Cut(f, "="); ok {
				vals[k] = v
			}
		}
	}
	return run.Jobs[0].Instance, vals
}

// onLab reports whether the job's printed pwd is under the lab host's work root.
func (ps *placementServer) onLab(vals map[string]string) bool {
	return strings.HasPrefix(vals["pwd"], ps.labRoot+"/")
}

// expectHost checks from inside the job (its pwd) and from the record
// that run name ran on the lab host (lab) or the local one.
func (ps *placementServer) expectHost(name string, lab bool) map[string]string {
	ps.t.Helper()
	inst, vals := ps.ran(name)
	ps.t.Logf("%s: %s %v", name, inst, vals)
	want := ps.local
	if lab {
		want = ps.lab
	}
	if inst != want || ps.onLab(vals) != lab {
		ps.t.Errorf("run %s ran on %s with pwd %q, want %s (lab root %s)", name, inst, vals["pwd"], want, ps.labRoot)
	}
	return vals
}

// refused plans yaml and expects 422 not_honoured naming field, with
// every one of words in the message.
func (ps *placementServer) refused(yaml, field string, words ...string) {
	ps.t.Helper()
	status, se := ps.call(ps.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(yaml), nil)
	if status != http.StatusUnprocessableEntity || se.Code != api.CodeNotHonoured || se.Field != "configuration."+field {
		ps.t.Errorf("plan: %d %s field %q (%s), want 422 %s naming %s", status, se.Code, se.Field, se.Message, api.CodeNotHonoured, field)
		return
	}
	for _, w := range words {
		if !strings.Contains(se.Message, w) {
			ps.t.Errorf("refusal of %s %q does not say %q", field, se.Message, w)
		}
	}
}

// plan plans yaml and returns the plan's notes.
func (ps *placementServer) plan(yaml string) []string {
	ps.t.Helper()
	var p api.RunPlan
	ps.must(http.StatusOK, ps.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(yaml), &p)
	return p.Notes
}

// pending submits yaml and waits until its job's why-pending says want.
func (ps *placementServer) pending(name, yaml, want string) {
	ps.t.Helper()
	ps.submit(yaml)
	var why string
	testutil.Eventually(ps.t, 30*time.Second, func() error {
		r := ps.getRun(name)
		if len(r.Jobs) > 0 {
			why = r.Jobs[0].WhyPending
		}
		if !strings.Contains(why, want) {
			return fmt.Errorf("run %s is %s, why pending %q, want %q", name, r.Status, why, want)
		}
		return nil
	})
	ps.t.Logf("%s waits: %s", name, why)
	if status, se := ps.call(ps.admin, "POST", "/api/v1/projects/main/runs/"+name+"/stop", api.StopRunRequest{Abort: true}, nil); status >= 300 {
		ps.t.Fatalf("stop %s: %d %s", name, status, se.Error())
	}
}

// TestPlacementFleetsAndInstancesChooseTheHost: `fleets` and `instances`
// put the job on the host they name (the job's pwd is under that host's
// work root) and the plan offers only those hosts; a name that matches no
// fleet or host of the project is refused at plan time, listing what
// exists.
func TestPlacementFleetsAndInstancesChooseTheHost(t *testing.T) {
	ps := startPlacementServer(t)
	ps.submit(job("to-lab", "fleets: [lab]\n"+res()))
	ps.submit(job("to-local", "fleets: [local]\n"+res()))
	ps.submit(job("by-hostname", "instances:\n  - hostname: lab-host\n"+res()))
	ps.submit(job("by-number", "instances:\n  - fleet: lab\n    instance: 0\n"+res()))
	ps.submit(job("by-name", "instances:\n  - name: "+ps.local+"\n"+res()))
	ps.expectHost("to-lab", true)
	ps.expectHost("to-local", false)
	ps.expectHost("by-hostname", true)
	ps.expectHost("by-number", true)
	ps.expectHost("by-name", false)

	var plan api.RunPlan
	ps.must(http.StatusOK, ps.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(job("offers", "fleets: [lab]\n"+res())), &plan)
	if len(plan.Offers) != 1 || plan.Offers[0].Instance != ps.lab {
		t.Errorf("the plan of a run for fleet lab offers %+v, want only %s", plan.Offers, ps.lab)
	}
	ps.refused(job("nofleet", "fleets: [lab, gpu-farm]\n"), "fleets", `"gpu-farm"`, `"lab"`, `"local"`)
	ps.refused(job("nohost", "instances:\n  - hostname: nowhere\n"), "instances", `hostname "nowhere"`, "lab-host")
	ps.refused(job("nonum", "instances:\n  - fleet: lab\n    instance: 3\n"), "instances", "number 3")
}

// TestPlacementGPUModelsVendorAndMemoryChooseTheHost: several GPU names,
// the vendor, a memory range's maximum, total_memory and
// compute_capability are matched against the devices hosts report (local:
// H100 80GB, cc 9.0; lab: MI300X 192GB, AMD, no cc), each run landing on
// the one host that fits; a request no host meets waits saying why.
func TestPlacementGPUModelsVendorAndMemoryChooseTheHost(t *testing.T) {
	ps := startPlacementServer(t)
	cases := []struct {
		name, gpu string
		lab       bool
	}{
		{"names", "  gpu:\n    name: [MI250X, MI300X]\n", true},
		{"names-nv", "  gpu:\n    name: [A100, H100]\n", false},
		{"amd", "  gpu: amd:1\n", true},
		{"nvidia", "  gpu: nvidia:1\n", false},
		{"mem-max", "  gpu: 40GB..100GB\n", false},
		{"mem-range", "  gpu: 150GB..200GB\n", true},
		{"total", "  gpu:\n    count: 2\n    total_memory: 300GB..\n", true},
		{"total-max", "  gpu:\n    count: 2\n    total_memory: ..200GB\n", false},
		{"cc", "  gpu:\n    compute_capability: \"9.0\"\n", false},
	}
	for _, c := range cases {
		ps.submit(job(c.name, res(c.gpu)))
	}
	for _, c := range cases {
		vals := ps.expectHost(c.name, c.lab)
		if vals["gpus"] == "" {
			t.Errorf("run %s got no GPU: %v", c.name, vals)
		}
	}
	ps.pending("nofit", job("nofit", res("  gpu: 100GB..150GB\n")), "100GB..150GB")
	ps.pending("cc10", job("cc10", res("  gpu:\n    compute_capability: \"10.0\"\n")), "compute capability 10.0")
	ps.refused(job("intel", res("  gpu: intel:1\n")), "resources.gpu.vendor", "Intel")
	ps.refused(job("cc-amd", res("  gpu:\n    vendor: amd\n    compute_capability: \"8.0\"\n")), "resources.gpu.compute_capability", "NVIDIA")
	ps.refused(job("total0", res("  gpu:\n    count: 0..2\n    total_memory: 100GB..\n")), "resources.gpu.total_memory", "count")
}

// TestPlacementGPUCountAndSharesReachTheJob: the job sees the devices it
// asked for (count), and a fractional GPU's share reaches its MPS
// variables; memory_share, which would get no device, is refused.
func TestPlacementGPUCountAndSharesReachTheJob(t *testing.T) {
	ps := startPlacementServer(t)
	ps.submit(job("two", "fleets: [local]\n"+res("  gpu: 2\n")))
	ps.submit(job("half", "fleets: [local]\n"+res("  gpu: 0.5\n")))
	if vals := ps.expectHost("two", false); len(strings.Split(vals["gpus"], ",")) != 2 || vals["num"] != "2" {
		t.Errorf("gpu: 2 saw %v", vals)
	}
	if vals := ps.expectHost("half", false); vals["share"] != "50" {
		t.Errorf("gpu: 0.5 saw %v", vals)
	}
	ps.refused(job("share", res("  gpu:\n    memory_share: 20GB\n")), "resources.gpu.memory_share", "no device")
}

// TestPlacementResourcesMatchWhatHostsReport: resources.cpu.arch and
// resources.disk are matched against the host's architecture and free
// disk: the host's own architecture and a small disk run (the job sees
// that architecture), another architecture and a disk no host has wait,
// saying so.
func TestPlacementResourcesMatchWhatHostsReport(t *testing.T) {
	ps := startPlacementServer(t)
	arch, other := "x86", "arm"
	if goruntime.GOARCH == "arm64" {
		arch, other = other, arch
	}
	ps.submit(job("arch", "resources:\n  cpu: "+arch+":1..\n  memory: 1MB..\n"))
	ps.submit(job("disk", "fleets: [lab]\n"+res("  disk: 1MB..\n")))
	if _, vals := ps.ran("arch"); (arch == "x86") != (vals["arch"] == "x86_64") {
		t.Errorf("cpu arch %s ran on %s", arch, vals["arch"])
	}
	ps.expectHost("disk", true)
	want := map[string]string{"arm": "cpu arch arm64", "x86": "cpu arch amd64"}[other]
	ps.pending("other-arch", job("other-arch", "resources:\n  cpu: "+other+":1..\n  memory: 1MB..\n"), want)
	ps.pending("huge-disk", job("huge-disk", res("  disk: 900TB..\n")), "of free disk")
	notes := ps.plan(job("disk-range", res("  disk: 1MB..2GB\n")))
	if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, "does not cap it at 2GB") }) {
		t.Errorf("a disk range's maximum is not noted: %q", notes)
	}
}

// TestPlacementProfileFiltersAgainstOwnedHosts: backends restrict to the
// hosts of those kinds (dstack's "remote" and gpud's own names), a list of
// only clouds is refused; spot_policy auto, max_price, creation_policy
// reuse and idle_duration run on owned hosts, with plan notes where gpud
// differs from a dstack server; spot is refused.
func TestPlacementProfileFiltersAgainstOwnedHosts(t *testing.T) {
	ps := startPlacementServer(t)
	ps.submit(job("registered", "backends: [registration]\n"+res()))
	ps.submit(job("mixed", "backends: [aws, local]\n"+res()))
	ps.submit(job("auto", "spot_policy: auto\nfleets: [lab]\n"+res()))
	ps.submit(job("price", "max_price: 1.5\nfleets: [lab]\n"+res()))
	ps.submit(job("reuse", "creation_policy: reuse\nfleets: [lab]\n"+res()))
	ps.submit(job("idle", "idle_duration: 0s\nfleets: [lab]\n"+res()))
	ps.expectHost("registered", true)
	ps.expectHost("mixed", false)
	for _, n := range []string{"auto", "price", "reuse", "idle"} {
		ps.expectHost(n, true)
	}
	var insts []api.Instance
	ps.must(http.StatusOK, ps.admin, "GET", "/api/v1/projects/main/instances", nil, &insts)
	if i := slices.IndexFunc(insts, func(i api.Instance) bool { return i.ID == ps.lab }); i < 0 ||
		insts[i].Status == store.InstanceTerminated || insts[i].Status == store.InstanceTerminating {
		t.Errorf("idle_duration: 0s took the host away: %+v", insts)
	}

	ps.pending("remote", job("remote", "backends: [remote]\n"+res()), `backend "ssh" or "remote"`)
	ps.refused(job("clouds", "backends: [aws, gcp]\n"), "backends", "no aws or gcp backend is configured", "backend plugins")
	ps.refused(job("spot", "spot_policy: spot\n"), "spot_policy", "spot instance")
	ps.refused(job("region", "regions: [us-east-1]\n"), "regions", "region")
	ps.refused(job("types", "instance_types: [p5.48xlarge]\n"), "instance_types", "instance type")

	for yaml, want := range map[string]string{
		job("n1", "backends: [aws, local]\n"):                    "no aws backend is configured; the run uses only local hosts",
		job("n2", "max_price: 1.5\n"):                            "cost nothing per hour",
		job("n3", "creation_policy: reuse-or-create\n"):          "gpud creates no instances: the run waits for a host of the project's fleets",
		job("n4", "idle_duration: 1h\n"):                         "creates no instances for a run",
		job("n5", "creation_policy: reuse\nspot_policy: auto\n"): "",
	} {
		// The process runtime's note is about the image, not placement.
		notes := slices.DeleteFunc(ps.plan(yaml), func(n string) bool { return strings.HasPrefix(n, "no image:") })
		if want == "" {
			if len(notes) > 0 {
				t.Errorf("plan of %q has notes %q, want none", yaml, notes)
			}
			continue
		}
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, want) }) {
			t.Errorf("plan of %q: notes %q, want one saying %q", yaml, notes, want)
		}
	}
}

// BenchmarkSnapshotWithPlacement measures one scheduling snapshot with
// 300 hosts (simulated by heartbeat) and 300 pending runs that share four
// placements: each placement is matched against the hosts once per
// cycle, so the snapshot grows with runs + placements × hosts, not with
// runs × hosts.
func BenchmarkSnapshotWithPlacement(b *testing.B) {
	const hosts, runs = 300, 300
	ts := startServer(b, "")
	inst := ts.store.Instances().List()[0]
	st, err := instanceSpecOf(inst)
	if err != nil {
		b.Fatal(err)
	}
	for i := range hosts {
		h := st.Host
		h.Hostname = fmt.Sprintf("sim-%04d", i)
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/agents/heartbeat", api.Heartbeat{Instance: h.Hostname, Host: h}, nil)
	}
	// Every placement keeps the runs pending (no host has an AMD GPU), so
	// the snapshot holds them all.
	placements := []string{"fleets: [local]\n", "backends: [remote]\n", "instances:\n  - hostname: sim-0001\n", ""}
	for i := range runs {
		ts.submit(fmt.Sprintf("type: task\nname: p%d\ncommands: [sleep 1]\n%sresources:\n  cpu: 0..\n  memory: 1MB..\n  gpu: amd:1\n", i, placements[i%len(placements)]))
	}
	b.ResetTimer()
	for range b.N {
		snap, _ := ts.scheduler.snapshot(ts.now())
		if len(snap.Jobs) != runs || len(snap.Nodes) < hosts {
			b.Fatalf("snapshot has %d jobs and %d nodes", len(snap.Jobs), len(snap.Nodes))
		}
	}
}

// TestPlacementTagsLabelTheJobsContainers: a run's tags label its job's
// container dev.gpud.tag.KEY=VALUE (the resource gpud creates for it, as
// dstack tags the instances it creates) and show in the run's
// configuration; on the process runtime, which has no container, they
// are refused.
func TestPlacementTagsLabelTheJobsContainers(t *testing.T) {
	ts := startDockerServer(t)
	ts.submit("type: task\nname: tagged\ncommands: [sleep 300]\ntags:\n  team: ml\n  cost-center: \"42\"\n" + res())
	ts.waitRun("tagged", "running", "", 60*time.Second)
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	f := make(client.Filters).Add("label", "dev.gpud.run=tagged")
	list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d containers of run tagged, want 1", len(list.Items))
	}
	if l := list.Items[0].Labels; l[tagLabelPrefix+"team"] != "ml" || l[tagLabelPrefix+"cost-center"] != "42" {
		t.Errorf("container labels %v lack the tags", l)
	}
	if cfg := string(ts.getRun("tagged").Configuration); !strings.Contains(cfg, `"tags":{"cost-center":"42","team":"ml"}`) {
		t.Errorf("the run's configuration does not show its tags: %s", cfg)
	}

	ps := startPlacementServer(t)
	ps.refused(job("tags", "tags:\n  team: ml\n"+res()), "tags", "process job")
}
