package slurm

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// runTask runs the gang's task script as srun would on node rank of a
// two-node allocation, and returns its output and the exit code it
// wrote.
func runTask(t *testing.T, g plugins.Gang, nodelist string, rank string, conf string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", taskScript(g, dir, 4))
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SLURM_JOB_NODELIST=" + nodelist, "SLURM_NODEID=" + rank, "SLURM_JOB_NUM_NODES=2"}
	if conf != "" {
		cmd.Env = append(cmd.Env, "SLURM_CONF="+conf)
	}
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	code, err := os.ReadFile(filepath.Join(dir, "rank-"+rank+".exit"))
	if err != nil {
		t.Fatalf("no exit code written: %v (output %q)", err, out)
	}
	return string(out), strings.TrimSpace(string(code))
}

// TestTaskScriptTakesTheClusterEnvironmentFromTheAllocation: each node's
// task gets its rank, the node count, the master and every node's
// address from the allocation (Slurm's hostlist expanded by scontrol
// where the test cluster's configuration is there, a plain list
// otherwise), the GPUs per node, and its own job's environment and
// commands; it writes its exit code.
func TestTaskScriptTakesTheClusterEnvironmentFromTheAllocation(t *testing.T) {
	job := func(id, cmd string) api.JobSpec {
		return api.JobSpec{ID: id, RunName: "mn", Commands: []string{"echo start", cmd},
			Env: map[string]string{"QUOTED": `a 'b' "c" $HOME`, "DSTACK_NODE_RANK": "99"}}
	}
	g := plugins.Gang{ID: "g1", Jobs: []api.JobSpec{job("j0", "exit 0"), job("j1", `echo "rank=$DSTACK_NODE_RANK n=$DSTACK_NODES_NUM master=$DSTACK_MASTER_NODE_IP gpus=$GPUD_GPUS_PER_NODE/$DSTACK_GPUS_NUM run=$DSTACK_RUN_NAME q=$QUOTED"; echo "$DSTACK_NODES_IPS" | tr '\n' ,; exit 4`)}}
	nodelist, conf := "node1,node2", ""
	if c := os.Getenv("GPUD_TEST_SLURM_CONF"); c != "" {
		nodelist, conf = "node[1-2]", c // scontrol show hostnames expands it
	}
	out, code := runTask(t, g, nodelist, "1", conf)
	want := `rank=1 n=2 master=node1 gpus=4/8 run=mn q=a 'b' "c" $HOME` + "\nnode1,node2,"
	if !strings.Contains(out, want) || code != "4" {
		t.Fatalf("task of rank 1: %q (code %s), want %q and code 4", out, code, want)
	}
	if out, code = runTask(t, g, nodelist, "0", conf); strings.TrimSpace(out) != "start" || code != "0" {
		t.Fatalf("task of rank 0: %q (code %s)", out, code)
	}
}

// TestSubmissionRefusesWhatABatchJobCannotDo names the field.
func TestSubmissionRefusesWhatABatchJobCannotDo(t *testing.T) {
	b, err := New(Config{URL: "http://127.0.0.1:1", User: "u", Token: "t", OutputDir: "/shared/out"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ok := api.JobSpec{ID: "j", Commands: []string{"true"}}
	for _, tc := range []struct {
		edit func(*api.JobSpec)
		want string
	}{
		{func(j *api.JobSpec) { j.Image = "busybox" }, "image busybox"},
		{func(j *api.JobSpec) { j.Privileged = true }, "privileged"},
		{func(j *api.JobSpec) { j.User = "root" }, `user "root"`},
		{func(j *api.JobSpec) { j.GPUs.Share = 0.5 }, "a fraction of a GPU"},
		{func(j *api.JobSpec) { j.Commands = nil }, "commands: required"},
		{func(j *api.JobSpec) { j.Env = map[string]string{"A-B": "x"} }, `env "A-B"`},
		{func(j *api.JobSpec) { j.Volumes = []api.JobVolume{{}} }, "volumes"},
	} {
		j := ok
		tc.edit(&j)
		if _, _, err := b.submission(plugins.Gang{ID: "g", Jobs: []api.JobSpec{j}}, []string{"gpu"}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", j, err, tc.want)
		}
	}
	d, script, err := b.submission(plugins.Gang{ID: "g", Jobs: []api.JobSpec{
		{ID: "a", Commands: []string{"true"}, CPUs: 1.5, Memory: 3*api.MB + 1, Cluster: api.JobCluster{GPUsPerNode: 2}},
		{ID: "b", Commands: []string{"true"}, Cluster: api.JobCluster{GPUsPerNode: 2}},
	}}, []string{"gpu", "gpu2"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Gres != "gpu:2" || d.CPUsPerTask != 2 || d.MemoryPerNode != 4 || d.Nodes[0] != 2 || d.Nodes[1] != 2 || d.Tasks != 2 || d.Partition != "gpu,gpu2" || d.Requeue ||
		d.StdOut != "/shared/out/gpud-g.out" || d.Comment != "gpud-gang gpud g a,b" {
		t.Fatalf("job description: %+v", d)
	}
	if !strings.Contains(script, "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --output='/shared/out/gpud-g'/rank-%n.out") {
		t.Fatalf("script: %s", script)
	}
}

// TestGresAndStates: GRES strings to GPU count and model; Slurm's job
// states to gpud's.
func TestGresAndStates(t *testing.T) {
	for gres, want := range map[string]struct {
		n     int
		model string
	}{
		"gpu:h100:4":                        {4, "H100"},
		"gpu:4":                             {4, ""},
		"gpu:a100-sxm4-80gb:8(S:0-1)":       {8, "A100"},
		"gpu:nvidia_h100_80gb_hbm3:2,nic:1": {2, "H100"},
		"gpu:a100:2,gpu:h100:2":             {4, ""},
		"(null)":                            {0, ""},
	} {
		if n, m := parseGPUGres(gres); n != want.n || m != want.model {
			t.Errorf("%s: %d %q, want %d %q", gres, n, m, want.n, want.model)
		}
	}
	b := &Backend{cfg: Config{OutputDir: t.TempDir()}}
	for _, tc := range []struct {
		job     slurmJob
		stopped bool
		state   api.JobState
		reason  api.ExitReason
		code    int
	}{
		{slurmJob{JobState: "PENDING", StateReason: "Resources"}, false, api.JobPulling, "", 0},
		{slurmJob{JobState: "RUNNING"}, false, api.JobRunning, "", 0},
		{slurmJob{JobState: "COMPLETED"}, false, api.JobDone, api.ExitExited, 0},
		{slurmJob{JobState: "FAILED", ExitCode: 3 << 8}, false, api.JobFailed, api.ExitExited, 3},
		{slurmJob{JobState: "CANCELLED", ExitCode: 15}, true, api.JobTerminated, api.ExitStopped, 143},
		{slurmJob{JobState: "CANCELLED", ExitCode: 15}, false, api.JobFailed, api.ExitSignaled, 143},
		{slurmJob{JobState: "TIMEOUT"}, false, api.JobFailed, api.ExitSignaled, 0},
		{slurmJob{JobState: "OUT_OF_MEMORY", ExitCode: 9}, false, api.JobFailed, api.ExitOOMKilled, 137},
		{slurmJob{JobState: "NODE_FAIL"}, false, api.JobFailed, api.ExitLost, -1},
	} {
		st := b.rankStatus("g", 0, "j", tc.job, true, tc.stopped)
		if st.State != tc.state || st.Reason != tc.reason || st.ExitCode != tc.code {
			t.Errorf("%+v stopped=%v: %+v, want %s %s %d", tc.job, tc.stopped, st, tc.state, tc.reason, tc.code)
		}
	}
	if st := b.rankStatus("g", 0, "j", slurmJob{JobState: "PENDING", StateReason: "Priority"}, true, false); st.Message != "Slurm job 0 is PENDING (reason: Priority)" {
		t.Errorf("pending message: %q", st.Message)
	}
}

// TestLogsFollowNoLinkTheJobMade: a job that replaces its output with a
// link to a file only the server may read gets its logs refused, not
// that file copied.
func TestLogsFollowNoLinkTheJobMade(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "state-key")
	if err := os.WriteFile(secret, []byte("SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gdir := filepath.Join(dir, gangName("g"))
	if err := os.Mkdir(gdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gdir, "jobs"), []byte("j0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(gdir, "rank-0.out")); err != nil {
		t.Fatal(err)
	}
	if _, err := openGangFile(gdir, "rank-0.out"); err == nil {
		t.Fatal("a link opened")
	}
	if err := os.Remove(filepath.Join(gdir, "rank-0.out")); err != nil {
		t.Fatal(err)
	}
	// The directory itself replaced by a link.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "rank-0.out"), []byte("SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, gangName("h"))
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	if _, err := openGangFile(link, "rank-0.out"); err == nil {
		t.Fatal("a linked directory opened")
	}
}

// TestForgottenJobIsReadFromItsExitCodes: a gang whose Slurm job
// slurmctld no longer lists (MinJobAge after its end; a stub slurmrestd
// answers an empty job list here, as the real one does then) is read from
// the exit codes its tasks wrote: done, failed with the code, or lost
// where a task wrote none.
func TestForgottenJobIsReadFromItsExitCodes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"meta":{},"errors":[],"jobs":[]}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	b, err := New(Config{URL: srv.URL, User: "u", Token: "t", OutputDir: dir}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	gdir := filepath.Join(dir, gangName("g"))
	if err := os.Mkdir(gdir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"jobs": "a\nb\nc\n", "rank-0.exit": "0\n", "rank-1.exit": "5\n"} {
		if err := os.WriteFile(filepath.Join(gdir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sts, err := b.Status(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 3 || sts[0].State != api.JobDone || sts[1].State != api.JobFailed || sts[1].ExitCode != 5 || sts[2].Reason != api.ExitLost {
		t.Fatalf("statuses: %+v", sts)
	}
	if sts, err := b.Status(context.Background(), "never"); err != nil || len(sts) != 0 {
		t.Fatalf("a gang never submitted: %+v %v", sts, err)
	}
}
