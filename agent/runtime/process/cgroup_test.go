package process_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/agent/runtime/process"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// The job's limits once bound its shim too: the shim joined the job's
// cgroup before starting the command, so under memory pressure the OOM
// killer could take the shim, and the agent reported the job lost, not
// oom_killed. Now the command starts inside the job's cgroup (cloned into
// it on v2, gated until moved on v1) and the shim stays where it was.
func TestOnlyTheJobRunsInItsCgroupNotItsShim(t *testing.T) {
	testutil.NeedRoot(t, "creating cgroups")
	rt := open(t, process.Config{DataDir: t.TempDir()})
	spec := api.JobSpec{ID: "cg-1", RunName: "cg", Memory: 64 * api.MB, CPUs: 0.5, Commands: []string{
		"echo job $(grep -E '^0::|memory' /proc/self/cgroup | head -1)",
		"echo shim $(grep -E '^0::|memory' /proc/$PPID/cgroup | head -1)",
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := rt.Start(ctx, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	exit, err := rt.Wait(ctx, h)
	if err != nil || exit.Code != 0 {
		t.Fatalf("exit %+v, %v; output %q", exit, err, output(t, rt, h))
	}
	var job, shim string
	for _, l := range output(t, rt, h) {
		if v, ok := strings.CutPrefix(l, "job "); ok {
			job = v
		} else if v, ok := strings.CutPrefix(l, "shim "); ok {
			shim = v
		}
	}
	if !strings.Contains(job, "/gpud-") || !strings.HasSuffix(job, "-cg-1") {
		t.Fatalf("the job runs in cgroup %q, want its own gpud-…-cg-1", job)
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if shim == job || !strings.Contains(string(own), shim) {
		t.Fatalf("the shim runs in %q (the job in %q), want the agent's own cgroup:\n%s", shim, job, own)
	}
}
