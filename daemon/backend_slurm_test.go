package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/plugins/slurm/slurmtest"
)

// slurmServer is a server without hosts whose project main has the
// built-in Slurm backend "hpc" (run as `gpud plugin serve slurm`, a
// subprocess of a gpud built for the test) on the real one-node Slurm of
// .ci/slurm.sh (slurmrestd with JWT auth, 4 fake H100s as gres).
func slurmServer(t *testing.T) (*testServer, *slurmtest.Cluster, string) {
	t.Helper()
	c := slurmtest.Find(t)
	bin := os.Getenv(testutil.StaticGpudEnv)
	if bin == "" {
		var err error
		if bin, err = testutil.BuildStaticGpud(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	ts := startServerWith(t, Options{NoLocalAgent: true, BuiltinBackends: []string{"slurm"}, PluginCommand: []string{bin, "plugin", "serve"}})
	out := c.OutputDir(t)
	cfg, err := json.Marshal(map[string]any{"url": c.URL, "user": c.User, "token": c.Token(t, c.User), "output_dir": out,
		"partitions": []string{"gpu"}, "server_id": fmt.Sprintf("daemon-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "hpc", Type: "slurm", Config: cfg}, nil)
	return ts, c, out
}

// TestSlurmBackendRunsStopsAndFailsTasks is issue 18's Slurm acceptance
// through the server: the offers show the node's 4 H100s; a 2-GPU task
// runs in Slurm for real (its environment and the allocation's GPUs) and
// its output reaches the run's logs (what `gpud logs` reads); a failing
// task ends with its exit code; `gpud stop` cancels a running one
// (scancel), which Slurm then runs no more.
func TestSlurmBackendRunsStopsAndFailsTasks(t *testing.T) {
	ts, c, _ := slurmServer(t)
	var offers []api.Offer
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/offers", nil, &offers)
	gpus := 0.0
	for _, o := range offers {
		if o.Backend == "hpc" && o.Resources.GPUName == "H100" {
			gpus += o.Resources.GPUs
		}
	}
	if gpus != 4 {
		t.Fatalf("offers: %+v", offers)
	}

	ts.submit("type: task\nname: two\ncommands:\n  - echo \"gpus=$CUDA_VISIBLE_DEVICES rank=$DSTACK_NODE_RANK nodes=$DSTACK_NODES_NUM per=$DSTACK_GPUS_PER_NODE run=$DSTACK_RUN_NAME\"\nresources:\n  gpu: H100:2\n")
	ts.waitRun("two", "done", "", 2*time.Minute)
	testutil.Eventually(t, time.Minute, func() error {
		if logs := ts.logText("two"); !strings.Contains(logs, "gpus=0,1 rank=0 nodes=1 per=2 run=two") {
			return fmt.Errorf("the run's logs: %q", logs)
		}
		return nil
	})

	ts.submit("type: task\nname: fails\ncommands:\n  - echo failing\n  - exit 3\nresources:\n  gpu: 1\n")
	r := ts.waitRunEnd("fails", 2*time.Minute)
	if r.Status != "failed" || r.ExitCode == nil || *r.ExitCode != 3 {
		t.Fatalf("the failing run: %s (%s) %+v", r.Status, r.Reason, r.ExitCode)
	}

	ts.submit("type: task\nname: st\ncommands:\n  - echo started\n  - sleep 600\nresources:\n  gpu: 1\n")
	ts.waitRun("st", "running", "", 2*time.Minute)
	testutil.Eventually(t, time.Minute, func() error {
		if logs := ts.logText("st"); !strings.Contains(logs, "started") {
			return fmt.Errorf("the run's logs: %q", logs)
		}
		return nil
	})
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/st/stop", api.StopRunRequest{}, nil)
	ts.waitRun("st", "terminated", "", 2*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testutil.Eventually(t, time.Minute, func() error {
		out, err := c.Slurm(ctx, "", "squeue", "-h", "-o", "%j %T")
		if err != nil {
			return err
		}
		if strings.Contains(out, "RUNNING") || strings.Contains(out, "PENDING") {
			return fmt.Errorf("Slurm still runs: %s", out)
		}
		return nil
	})
}

// TestSlurmQueuedRunShowsSlurmsReason: while another user's job holds
// the node's 4 GPUs, a 2-GPU run gpud admitted waits in Slurm's queue and
// its reason (the run's, which `gpud ps` shows) names Slurm's: Resources;
// it runs once the other job ends.
func TestSlurmQueuedRunShowsSlurmsReason(t *testing.T) {
	ts, c, _ := slurmServer(t)
	holder := c.Hold(t, 4)
	ts.submit("type: task\nname: q\ncommands:\n  - echo ran\nresources:\n  gpu: 2\n")
	testutil.Eventually(t, 2*time.Minute, func() error {
		r := ts.getRun("q")
		if !strings.Contains(r.Reason, "PENDING (reason: Resources)") {
			return fmt.Errorf("run q is %s (%s)", r.Status, r.Reason)
		}
		return nil
	})
	c.Cancel(holder)
	ts.waitRun("q", "done", "", 2*time.Minute)
}

// TestSlurmBackendRefusesImagesByName: the Slurm backend runs commands on
// its nodes without a container (Info.NoImage), so a run that sets
// image, python or nvcc is refused by the plan naming the backend and
// the field, while a run without one gets no default image and runs.
func TestSlurmBackendRefusesImagesByName(t *testing.T) {
	ts, _, _ := slurmServer(t)
	ts.refusedAt("type: task\nname: img\nimage: busybox\ncommands:\n  - echo hi\nresources:\n  gpu: 1\n", "image", "job backend hpc (slurm)", "does not advertise image")
	ts.refusedAt("type: task\nname: py\npython: \"3.11\"\ncommands:\n  - python --version\nresources:\n  gpu: 1\n", "python", "job backend hpc (slurm)", "does not advertise image")
	ts.submit("type: task\nname: noimg\ncommands:\n  - echo no image\nresources:\n  gpu: 1\n")
	ts.waitRun("noimg", "done", "", 2*time.Minute)
}

// TestSlurmWrongTokenIsRefusedAtAdd: a wrong JWT, a wrong API version and
// an unknown partition fail at backend add (the plugin's check against
// the real slurmrestd), naming what is wrong, and the stored backend of
// the same name keeps running jobs.
func TestSlurmWrongTokenIsRefusedAtAdd(t *testing.T) {
	ts, c, out := slurmServer(t)
	good := map[string]any{"url": c.URL, "user": c.User, "token": c.Token(t, c.User), "output_dir": out}
	for _, tc := range []struct {
		key  string
		val  any
		want string
	}{
		{"token", "eyJhbGciOiJIUzI1NiJ9.e30.wrong", "refused user " + c.User + "'s token"},
		{"api_version", "v0.0.99", "does not serve API version v0.0.99"},
		{"partitions", []string{"nope"}, `"nope" is not a partition of the cluster`},
	} {
		bad := map[string]any{}
		for k, v := range good {
			bad[k] = v
		}
		bad[tc.key] = tc.val
		cfg, err := json.Marshal(bad)
		if err != nil {
			t.Fatal(err)
		}
		code, e := ts.call(ts.admin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "hpc", Type: "slurm", Config: cfg}, nil)
		if msg := e.Message + strings.Join(e.Errors, "\n"); code == http.StatusOK || !strings.Contains(msg, tc.want) {
			t.Fatalf("%s at backend add: %d %v, want %q", tc.key, code, e, tc.want)
		}
	}
	ts.submit("type: task\nname: after\ncommands:\n  - echo still here\nresources:\n  gpu: 1\n")
	ts.waitRun("after", "done", "", 2*time.Minute)
}
