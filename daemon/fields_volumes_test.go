package daemon

import (
	"context"
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
)

// volumeRoot is a directory the tests' host admin allows for volumes:
// outside the server's data dir, traversable by the process runtime's
// unprivileged job user.
func volumeRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpud-volumes-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// An instance volume keeps data across runs on the same host: run 1
// writes into a host directory the agent makes (its path interpolates the
// node's rank), run 2, written in the long form, reads it back.
func TestInstanceVolumeKeepsDataAcrossRunsOnTheSameHost(t *testing.T) {
	root := volumeRoot(t)
	ts := startServerWith(t, Options{Runtime: "process", VolumePrefixes: []string{root}})
	cache := filepath.Join(root, "cache-0")
	ts.runOutput("vwrite", fmt.Sprintf(`type: task
name: vwrite
volumes:
  - %[1]s/cache-${{ dstack.node_rank }}:%[1]s/cache-${{ dstack.node_rank }}
commands:
  - echo kept-across-runs > %[2]s/data.txt
  - ls -d %[2]s
`, root, cache), "done")
	fi, err := os.Stat(cache)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o777 {
		t.Fatalf("the agent did not make the volume's directory %s mode 0777 (as dstack does): %v %v", cache, fi, err)
	}
	_, out := ts.runOutput("vread", fmt.Sprintf(`type: task
name: vread
volumes:
  - instance_path: %[1]s
    path: %[1]s
commands:
  - cat %[1]s/data.txt
`, cache), "done")
	if !slices.Contains(out, "kept-across-runs") {
		t.Fatalf("run 2 did not read what run 1 wrote into the volume: %q", out)
	}
	// The process runtime cannot mount a host path elsewhere: the plan
	// says so on the path, with the fix.
	ts.refusedAt(fmt.Sprintf("type: task\ncommands: [true]\nvolumes:\n  - %s:/data\n", cache), "volumes[0].path", "process runtime", "same path")
}

// A Docker job mounts the host directory at its own path: what it writes
// at /cache lands in the host directory, and the next run sees it there.
func TestInstanceVolumeMountsIntoADockerJobAtItsPath(t *testing.T) {
	root := volumeRoot(t)
	ts := startContainerServer(t, Options{VolumePrefixes: []string{root}})
	vol := fmt.Sprintf("volumes:\n  - %s/models:/cache\n", root)
	ts.runOutput("dwrite", "type: task\nname: dwrite\n"+vol+"commands:\n  - echo from-the-container > /cache/weights\n", "done")
	b, err := os.ReadFile(filepath.Join(root, "models", "weights"))
	if err != nil || strings.TrimSpace(string(b)) != "from-the-container" {
		t.Fatalf("the host directory lacks what the container wrote at /cache: %q %v", b, err)
	}
	_, out := ts.runOutput("dread", "type: task\nname: dread\n"+vol+"commands:\n  - cat /cache/weights\n", "done")
	if !slices.Contains(out, "from-the-container") {
		t.Fatalf("run 2 did not see the volume's file at /cache: %q", out)
	}
}

// An optional volume whose host path this host's admin does not allow is
// skipped: the plan notes it, the job runs without it, and the agent
// makes nothing there.
func TestOptionalInstanceVolumeIsSkippedWhereTheHostDoesNotAllowIt(t *testing.T) {
	root := volumeRoot(t)
	ts := startServerWith(t, Options{Runtime: "process", VolumePrefixes: []string{root}})
	outside := filepath.Join(volumeRoot(t), "not-allowed", "missing")
	yaml := fmt.Sprintf(`type: task
name: vopt
volumes:
  - instance_path: %[1]s
    path: %[1]s
    optional: true
commands:
  - test -e %[1]s && echo present || echo absent
`, outside)
	var plan api.RunPlan
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(yaml), &plan)
	if !slices.ContainsFunc(plan.Notes, func(n string) bool { return strings.Contains(n, "optional volumes") }) {
		t.Errorf("the plan does not note that optional volumes may be skipped: %q", plan.Notes)
	}
	_, out := ts.runOutput("vopt", yaml, "done")
	if !slices.Contains(out, "absent") {
		t.Fatalf("the job saw the optional volume's path: %q", out)
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Fatalf("the agent made %s outside the allowed prefixes: %v", outside, err)
	}
	// Without optional, the same volume is refused at the plan.
	ts.refusedAt(strings.Replace(yaml, "    optional: true\n", "", 1), "volumes[0].instance_path", "no host this run may use", "--allow-volume-prefix")
}

// Attacks on the host through volumes are refused with a clear error
// naming the field: at the plan for a project's user (the root, the
// server's data dir, a `..` escape, a path outside every allowed prefix,
// a named volume), and by the agent at start for what gets past a plan
// (its data dir, a symlink that leads out of the allowed prefix).
func TestInstanceVolumeAttacksAreRefusedWithTheField(t *testing.T) {
	root := volumeRoot(t)
	ts := startServerWith(t, Options{Runtime: "process", VolumePrefixes: []string{root}})
	mallory := ts.userMember("mallory")
	for _, c := range []struct {
		volume, field string
		words         []string
	}{
		{"/:/host", "volumes[0].instance_path", []string{"root directory", "no host mounts it"}},
		{ts.opts.DataDir + ":/state", "volumes[0].instance_path", []string{"data dir", "no host mounts it"}},
		{ts.opts.DataDir + "/agent:/state", "volumes[0].instance_path", []string{"data dir"}},
		{root + "/../etc:/x", "volumes[0].instance_path", []string{"`..`"}},
		{"/etc:/x", "volumes[0].instance_path", []string{"no host this run may use lets jobs mount /etc", root, "--allow-volume-prefix"}},
		{"~/data:/x", "volumes[0].instance_path", []string{"absolute host path"}},
		{root + "/${{ env.WHERE }}:/x", "volumes[0].instance_path", []string{"dstack.node_rank"}},
		{"my-volume:/data", "volumes[0].name", []string{`volume "my-volume" does not exist in project "main"`, "gpud apply"}},
	} {
		yaml := "type: task\ncommands: [true]\nvolumes:\n  - " + c.volume + "\n"
		status, se := ts.call(mallory, "POST", "/api/v1/projects/main/runs/apply", yamlApply(yaml), nil)
		if status != http.StatusUnprocessableEntity || se.Code != api.CodeNotHonoured {
			t.Errorf("volume %s: %d %s %q, want 422 %s", c.volume, status, se.Code, se.Errors, api.CodeNotHonoured)
			continue
		}
		i := slices.IndexFunc(se.Errors, func(e string) bool { return strings.Contains(e, ": "+c.field+": ") })
		if i < 0 {
			t.Errorf("volume %s: the refusal does not name %s: %q", c.volume, c.field, se.Errors)
			continue
		}
		t.Logf("volume %s: %s", c.volume, se.Errors[i])
		for _, w := range c.words {
			if !strings.Contains(se.Errors[i], w) {
				t.Errorf("volume %s: %q lacks %q", c.volume, se.Errors[i], w)
			}
		}
	}
	if runs := ts.store.Runs().List(); len(runs) != 0 {
		t.Fatalf("a refused run was stored: %d runs", len(runs))
	}

	// The agent checks again at start, with symlinks resolved.
	if err := os.Symlink("/etc", filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, c := range []struct{ hostPath, words string }{
		{filepath.Join(root, "escape", "x"), "leads to /etc/x"},
		{filepath.Join(ts.opts.DataDir, "agent"), "data dir"},
		{"/", "root directory"},
		{filepath.Join(root, "escape"), "leads to /etc"},
	} {
		spec := api.JobSpec{ID: fmt.Sprintf("attack-%d", i), RunName: "attack", Commands: []string{"true"},
			Volumes: []api.JobVolume{{HostPath: c.hostPath, Path: c.hostPath, Optional: true}}}
		if i == 0 {
			spec.Volumes[0].Optional = false
		}
		st, err := ts.hosts.local.agent.Start(ctx, spec)
		t.Logf("agent start with volume %s: %v", c.hostPath, err)
		if err == nil || !strings.Contains(err.Error(), c.words) || st.Reason != api.ExitStartFailed {
			t.Errorf("agent start with volume %s: %v (%s), want it refused (%q)", c.hostPath, err, st.Reason, c.words)
		}
	}
	if _, err := os.Stat("/etc/x"); !os.IsNotExist(err) {
		t.Errorf("the agent made /etc/x through the symlink: %v", err)
	}
}

// `gpud agent --allow-volume-prefix` is the registered host's admin's
// choice: before such a host exists the plan refuses the volume with the
// flag to ask for; once it registers (reporting its prefixes and its data
// dir), a run that names no fleet is placed there, not on the server's
// host, which allows none, and the volume holds what the job wrote. The
// agent's own data dir stays refused under its prefix.
func TestRegisteredHostMountsOnlyUnderItsAllowVolumePrefix(t *testing.T) {
	bin := staticGpud(t)
	root := volumeRoot(t)
	ts := startServerWith(t, Options{Runtime: "process", RegistrationListen: "127.0.0.1:0"})
	vol := fmt.Sprintf("volumes:\n  - %[1]s/shared:%[1]s/shared\n", root)
	ts.refusedAt(task("vreg", vol, "true"), "volumes[0].instance_path", "no host this run may use", "gpud agent --allow-volume-prefix")

	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply",
		api.ApplyRequest{ConfigurationYAML: "type: fleet\nname: vols\nnodes: 0..4\n"}, nil)
	var tok api.RegistrationToken
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/fleets/vols/tokens", nil, &tok)
	agentDir := filepath.Join(root, "agent-data") // under the prefix, and still refused
	_, out := testutil.RegisteringAgent{Bin: bin, URL: ts.RegistrationURL(), Token: tok.Token, CA: filepath.Join(ts.opts.DataDir, RegistrationCAFile),
		FakeGPUs: "1xA100:40GB", Hostname: "vols-host", DataDir: agentDir,
		Args: []string{"--agent-id", "vols-" + randomWord(t), "--allow-volume-prefix", root}}.Start(t)
	testutil.Eventually(t, 60*time.Second, func() error {
		for _, h := range ts.candidateHosts("main") {
			if h.fleetName == "vols" && slices.Contains(h.info.VolumePrefixes, root) {
				return nil
			}
		}
		return fmt.Errorf("the vols host has not registered with its volume prefix; its output:\n%s", out)
	})
	run, _ := ts.runOutput("vreg", task("vreg", vol, "echo on-the-registered-host > "+root+"/shared/f"), "done")
	if len(run.Jobs) != 1 || !strings.Contains(run.Jobs[0].Instance, "vols") {
		t.Errorf("the run with a volume went to %+v, want the host of fleet vols (the server's host allows no volumes)", run.Jobs)
	}
	if b, err := os.ReadFile(filepath.Join(root, "shared", "f")); err != nil || strings.TrimSpace(string(b)) != "on-the-registered-host" {
		t.Errorf("the volume lacks what the job wrote: %q %v", b, err)
	}
	ts.refusedAt(task("vdata", fmt.Sprintf("volumes:\n  - %s:/x\n", agentDir), "true"), "volumes[0].instance_path", "data dir")
}

// The embedded laptop mode (gpud run with no server) mounts any path of
// the user's own machine, with no prefix to allow, but still never its
// data dir.
func TestEmbeddedLaptopModeMountsAnyPathButItsDataDir(t *testing.T) {
	dir := filepath.Join(volumeRoot(t), "anywhere")
	ts := startServerWith(t, Options{Embedded: true, Runtime: "process"})
	_, out := ts.runOutput("vlap", fmt.Sprintf("type: task\nname: vlap\nvolumes:\n  - %[1]s:%[1]s\ncommands:\n  - echo laptop > %[1]s/f\n  - cat %[1]s/f\n", dir), "done")
	if !slices.Contains(out, "laptop") {
		t.Fatalf("the laptop-mode job did not write into its volume: %q", out)
	}
	ts.refusedAt(fmt.Sprintf("type: task\ncommands: [true]\nvolumes:\n  - %s:/x\n", ts.opts.DataDir), "volumes[0].instance_path", "data dir")
}

// An SSH fleet's admin, who holds its hosts' keys, allows volume
// directories in the fleet (ssh_config.volume_prefixes, a gpud
// extension): the server starts each agent with --allow-volume-prefix,
// and a run's instance volume on that host keeps data across runs.
func TestSSHFleetVolumePrefixesLetRunsKeepDataOnTheHost(t *testing.T) {
	bin := staticGpud(t)
	image := testutil.SSHDImage(t)
	nw := testutil.NewDockerNetwork(t)
	key := testutil.NewClientKey(t, t.TempDir())
	host := testutil.StartSSHD(t, image, nw, key.Public)
	ts := startServerWith(t, Options{Runtime: "process", AgentBinary: bin,
		SSHAgentArgs: []string{"--runtime", "process", "--fake-gpus", "1xH100:80GB"}})
	vol := "volumes:\n  - /data/cache-${{ dstack.node_rank }}:/data/cache-${{ dstack.node_rank }}\nresources:\n  gpu: 1\n"
	ts.refusedAt(task("vssh", vol, "true"), "volumes[0].instance_path", "--allow-volume-prefix")
	fleet := sshFleetYAML(key.IdentityFile, host) + "  volume_prefixes: [/data]\n"
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply", api.ApplyRequest{ConfigurationYAML: fleet}, nil)
	testutil.Eventually(t, 90*time.Second, func() error {
		for _, h := range ts.candidateHosts("main") {
			if h.fleetName == "lab" && slices.Contains(h.info.VolumePrefixes, "/data") {
				return nil
			}
		}
		return fmt.Errorf("the SSH host has not come up allowing /data")
	})
	ts.runOutput("vssh", "type: task\nname: vssh\n"+vol+"commands:\n  - echo kept-on-the-ssh-host > /data/cache-0/f\n", "done")
	_, out := ts.runOutput("vssh2", "type: task\nname: vssh2\n"+vol+"commands:\n  - cat /data/cache-0/f\n", "done")
	if !slices.Contains(out, "kept-on-the-ssh-host") {
		t.Fatalf("run 2 on the SSH host did not read what run 1 wrote: %q", out)
	}
	if got := strings.TrimSpace(host.Exec(t, "cat /data/cache-0/f")); got != "kept-on-the-ssh-host" {
		t.Fatalf("the SSH host's /data/cache-0/f holds %q", got)
	}
}
