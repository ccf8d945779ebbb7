package slurm_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/plugins/slurm"
	"gpud.dev/gpud/plugins/slurm/slurmtest"
)

// newBackend is the backend on the test cluster, with its own output
// directory.
func newBackend(t testing.TB, c *slurmtest.Cluster, edit func(*slurm.Config)) *slurm.Backend {
	t.Helper()
	cfg := slurm.Config{URL: c.URL, User: c.User, Token: c.Token(t, c.User), OutputDir: c.OutputDir(t), ServerID: "test-" + fmt.Sprint(time.Now().UnixNano())}
	if edit != nil {
		edit(&cfg)
	}
	b, err := slurm.New(cfg, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

func job(id string, gpus int, commands ...string) api.JobSpec {
	return api.JobSpec{ID: id, RunName: "r-" + id, Commands: commands, Env: map[string]string{"FOO": "it's bar"},
		Cluster: api.JobCluster{NodesNum: 1, GPUsPerNode: gpus}, Memory: 64 * api.MB}
}

// waitState polls the gang until its first job reaches a state in want.
func waitState(t *testing.T, b *slurm.Backend, gang string, want ...api.JobState) api.JobStatus {
	t.Helper()
	var last api.JobStatus
	testutil.Eventually(t, 2*time.Minute, func() error {
		sts, err := b.Status(context.Background(), gang)
		if err != nil {
			return err
		}
		if len(sts) == 0 {
			return fmt.Errorf("no status for gang %s", gang)
		}
		last = sts[0]
		for _, w := range want {
			if last.State == w {
				return nil
			}
		}
		return fmt.Errorf("gang %s: %+v, want %v", gang, last, want)
	})
	return last
}

func logText(t *testing.T, b *slurm.Backend, id string) string {
	t.Helper()
	var lines []string
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var prev time.Time
	err := b.Logs(ctx, id, false, func(e api.JobLogEntry) error {
		if e.Time.Before(prev) {
			return fmt.Errorf("log times go back: %v after %v", e.Time, prev)
		}
		prev = e.Time
		lines = append(lines, e.Line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestCheckRefusesWhatIsWrongAtAdd: the check reaches slurmrestd and
// refuses a wrong token, an API version it does not serve, an unknown
// partition and an unreachable URL, each naming it.
func TestCheckRefusesWhatIsWrongAtAdd(t *testing.T) {
	c := slurmtest.Find(t)
	good := slurm.Config{URL: c.URL, User: c.User, Token: c.Token(t, c.User), OutputDir: c.OutputDir(t)}
	for _, tc := range []struct {
		name string
		edit func(*slurm.Config)
		want string
	}{
		{"token", func(x *slurm.Config) { x.Token = good.Token[:len(good.Token)-4] + "AAAA" }, "refused user " + c.User + "'s token"},
		{"version", func(x *slurm.Config) { x.APIVersion = "v0.0.99" }, "does not serve API version v0.0.99"},
		{"partition", func(x *slurm.Config) { x.Partitions = []string{"nope"} }, `"nope" is not a partition of the cluster (it has gpu)`},
		{"url", func(x *slurm.Config) { x.URL = "http://127.0.0.1:1" }, "cannot reach slurmrestd at http://127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			b, err := slurm.New(cfg, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Check(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("check: %v, want %q", err, tc.want)
			}
		})
	}
	b, err := slurm.New(good, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := slurm.New(slurm.Config{URL: c.URL, User: c.User, Token: "x"}, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "output_dir: required") {
		t.Fatalf("no output_dir: %v", err)
	}
}

// TestOffersComeFromThePartitionsNodesAndGres: the test node's 4 GPUs
// (gres gpu:h100:4) and CPUs.
func TestOffersComeFromThePartitionsNodesAndGres(t *testing.T) {
	c := slurmtest.Find(t)
	b := newBackend(t, c, nil)
	offers, err := b.Offers(context.Background(), plugins.OfferQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(offers) != 1 || offers[0].Resources.GPUs != 4 || offers[0].Resources.GPUName != "H100" || offers[0].Resources.CPUs < 1 || offers[0].Resources.Memory == 0 {
		t.Fatalf("offers: %+v", offers)
	}
	if o, err := b.Offers(context.Background(), plugins.OfferQuery{GPUs: 8}); err != nil || len(o) != 0 {
		t.Fatalf("offers of 8 GPUs: %+v %v", o, err)
	}
	if o, err := b.Offers(context.Background(), plugins.OfferQuery{GPUName: "A100"}); err != nil || len(o) != 0 {
		t.Fatalf("offers of A100: %+v %v", o, err)
	}
}

// TestTwoGPUJobRunsAndItsOutputIsRead: a 2-GPU job runs in Slurm with its
// environment and the allocation's GPUs, ends done, its output is read
// back, and Stop of the finished gang removes its files; List forgets it.
func TestTwoGPUJobRunsAndItsOutputIsRead(t *testing.T) {
	c := slurmtest.Find(t)
	b := newBackend(t, c, nil)
	g := plugins.Gang{ID: "two-gpus", Project: "main", Jobs: []api.JobSpec{
		job("j-two", 2, `echo "foo=$FOO gpus=$CUDA_VISIBLE_DEVICES rank=$DSTACK_NODE_RANK nodes=$DSTACK_NODES_NUM per=$DSTACK_GPUS_PER_NODE run=$DSTACK_RUN_NAME"`, "echo to-stderr >&2"),
	}}
	if err := b.StartGang(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	if err := b.StartGang(context.Background(), g); err != nil { // a repeat is a no-op
		t.Fatal(err)
	}
	if gangs, err := b.List(context.Background()); err != nil || len(gangs) != 1 || gangs[0] != g.ID {
		t.Fatalf("list: %v %v", gangs, err)
	}
	st := waitState(t, b, g.ID, api.JobDone, api.JobFailed)
	if st.State != api.JobDone || st.ExitCode != 0 || st.StartedAt.IsZero() || !strings.HasPrefix(st.Handle, "slurm:") {
		t.Fatalf("status: %+v", st)
	}
	logs := logText(t, b, "j-two")
	if !strings.Contains(logs, "foo=it's bar gpus=0,1 rank=0 nodes=1 per=2 run=r-j-two") || !strings.Contains(logs, "to-stderr") {
		t.Fatalf("logs: %q", logs)
	}
	if err := b.Stop(context.Background(), g.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if gangs, err := b.List(context.Background()); err != nil || len(gangs) != 0 {
		t.Fatalf("list after the clean-up: %v %v", gangs, err)
	}
}

// TestFailingJobExitsWithItsCode: exit 7 is failed with code 7.
func TestFailingJobExitsWithItsCode(t *testing.T) {
	c := slurmtest.Find(t)
	b := newBackend(t, c, nil)
	if err := b.StartGang(context.Background(), plugins.Gang{ID: "fails", Jobs: []api.JobSpec{job("j-fail", 0, "echo before", "exit 7")}}); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, b, "fails", api.JobDone, api.JobFailed)
	if st.State != api.JobFailed || st.ExitCode != 7 || st.Reason != api.ExitExited {
		t.Fatalf("status: %+v", st)
	}
	if logs := logText(t, b, "j-fail"); logs != "before" {
		t.Fatalf("logs: %q", logs)
	}
}

// TestStopCancelsARunningJob: Stop (scancel) ends a running job, which is
// then terminated; its output so far stays readable until the clean-up.
func TestStopCancelsARunningJob(t *testing.T) {
	c := slurmtest.Find(t)
	b := newBackend(t, c, nil)
	if err := b.StartGang(context.Background(), plugins.Gang{ID: "stops", Jobs: []api.JobSpec{job("j-stop", 1, "echo started", "sleep 600")}}); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, b, "stops", api.JobRunning)
	id := strings.TrimPrefix(st.Handle, "slurm:")
	testutil.Eventually(t, time.Minute, func() error {
		if l := logText(t, b, "j-stop"); l != "started" {
			return fmt.Errorf("logs %q", l)
		}
		return nil
	})
	if err := b.Stop(context.Background(), "stops", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, b, "stops", api.JobTerminated, api.JobFailed, api.JobDone)
	if st.State != api.JobTerminated || st.Reason != api.ExitStopped {
		t.Fatalf("status after stop: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The SIGTERM ended the task (FAILED, its code 143), or the cancel
	// after the grace did (CANCELLED): either way Slurm runs it no more.
	if s := c.State(ctx, id); s != "CANCELLED" && s != "FAILED" {
		t.Fatalf("Slurm's state of job %s: %q", id, s)
	}
}

// TestQueuedJobShowsSlurmsReason: with another user's job holding all 4
// GPUs, a 2-GPU gang waits in Slurm's queue and its status says why
// (Resources); it runs once the other job is cancelled.
func TestQueuedJobShowsSlurmsReason(t *testing.T) {
	c := slurmtest.Find(t)
	b := newBackend(t, c, nil)
	holder := c.Hold(t, 4)
	if err := b.StartGang(context.Background(), plugins.Gang{ID: "queued", Jobs: []api.JobSpec{job("j-q", 2, "echo ran")}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, func() error {
		sts, err := b.Status(context.Background(), "queued")
		if err != nil || len(sts) != 1 {
			return fmt.Errorf("%v %v", sts, err)
		}
		if sts[0].State != api.JobPulling || !strings.Contains(sts[0].Message, "PENDING (reason: Resources)") {
			return fmt.Errorf("status %+v", sts[0])
		}
		return nil
	})
	c.Cancel(holder)
	st := waitState(t, b, "queued", api.JobDone, api.JobFailed)
	if st.State != api.JobDone {
		t.Fatalf("status: %+v", st)
	}
}

func TestMain(m *testing.M) { os.Exit(m.Run()) }
