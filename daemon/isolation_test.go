package daemon

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// TestTwoProjectsNeverShareARegisteredHost is the two-project isolation
// end to end of issue 11: projects a and b each register a one-GPU host
// into their own fleet (real `gpud agent --server` processes over the real
// TLS tunnel) and each submit two one-GPU runs whose environment holds the
// project's secret. Each project's first run runs on its own host; each
// second run waits although the other project's host would fit it (before,
// the scheduler placed it there, with its secrets). Each agent only ever
// saw its own project's jobs, and no file in an agent's data dir holds the
// other project's secret.
func TestTwoProjectsNeverShareARegisteredHost(t *testing.T) {
	rs := startRegServer(t, Options{NoLocalAgent: true})
	type side struct {
		project, secret, dir string
		token                string
		inst                 api.Instance
		out                  *testutil.SyncBuffer
	}
	sides := []*side{{project: "a"}, {project: "b"}}
	for _, sd := range sides {
		sd.token = rs.project(sd.project, "manager-"+sd.project)
		sd.secret = fmt.Sprintf("secret-of-%s-%d", sd.project, time.Now().UnixNano())
		rs.must(http.StatusOK, sd.token, "PUT", "/api/v1/projects/"+sd.project+"/secrets/api_key", api.SetSecretRequest{Value: sd.secret}, nil)
		reg := rs.fleetWithToken(sd.token, sd.project, "fleet-"+sd.project)
		sd.dir = t.TempDir()
		_, _, sd.out = rs.agent(reg.Token, sd.dir, "host-"+sd.project, "1xA100:40GB")
	}
	for _, sd := range sides {
		sd.inst = rs.waitInstances(sd.project, "fleet-"+sd.project, 1, sd.out)[0]
	}
	t.Cleanup(func() { stopIsolationRuns(rs, sides[0].project, sides[1].project) })

	submit := func(sd *side, run string) {
		rs.must(http.StatusCreated, sd.token, "POST", "/api/v1/projects/"+sd.project+"/runs/apply", yamlApply(
			"type: task\nname: "+run+"\nenv: [\"API_KEY=${{ secrets.api_key }}\"]\ncommands: [\"echo key=$API_KEY\", \"sleep 3013\"]\nresources:\n  gpu: 1\n"), nil)
	}
	// a goes first with both runs: with b's host idle, a's second run is
	// exactly what the old scheduler put on it.
	for _, sd := range sides {
		submit(sd, sd.project+"-1")
		waitProjectRun(rs, sd.project, sd.project+"-1", func(r api.Run) bool { return r.Status == "running" })
		submit(sd, sd.project+"-2")
		waitProjectRun(rs, sd.project, sd.project+"-2", func(r api.Run) bool { return r.Jobs[0].WhyPending != "" })
	}

	for _, sd := range sides {
		first := waitProjectRun(rs, sd.project, sd.project+"-1", func(r api.Run) bool { return r.Status == "running" })
		if first.Jobs[0].Instance != sd.inst.ID {
			t.Errorf("%s-1 runs on %s, want its project's host %s", sd.project, first.Jobs[0].Instance, sd.inst.ID)
		}
		second := waitProjectRun(rs, sd.project, sd.project+"-2", func(api.Run) bool { return true })
		if j := second.Jobs[0]; j.Instance != "" || j.Status != "submitted" {
			t.Errorf("%s-2 is %s on %q (%s); want it waiting: the other project's host is not its to use", sd.project, j.Status, j.Instance, j.WhyPending)
		}
		testutil.Eventually(t, 20*time.Second, func() error {
			if lines := projectRunLogs(rs, sd.project, sd.project+"-1"); !strings.Contains(strings.Join(lines, "\n"), "key="+sd.secret) {
				return testutil.Errorf("%s-1 logs %q lack its own secret", sd.project, lines)
			}
			return nil
		})
	}

	// What each agent got: its own project's jobs only, and not a byte of
	// the other project's secret anywhere in its data dir.
	for i, sd := range sides {
		other := sides[1-i]
		l := rs.agents.get(sd.inst.ID)
		if l == nil {
			t.Fatalf("no link to %s", sd.inst.ID)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		jobs, err := l.client.List(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if rec, err := rs.store.Jobs().Get(j.ID); err != nil || rec.Project != sd.project {
				t.Errorf("host of %s received job %s of project %q", sd.project, j.ID, rec.Project)
			}
		}
		if len(jobs) != 1 {
			t.Errorf("host of %s has %d jobs, want its one running run", sd.project, len(jobs))
		}
		err = filepath.WalkDir(sd.dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !d.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if strings.Contains(string(b), other.secret) {
				t.Errorf("%s on the host of %s holds project %s's secret", path, sd.project, other.project)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// waitProjectRun waits until run of project satisfies ok and returns it.
func waitProjectRun(rs *regServer, project, run string, ok func(api.Run) bool) api.Run {
	rs.t.Helper()
	var r api.Run
	testutil.Eventually(rs.t, 30*time.Second, func() error {
		rs.must(http.StatusOK, rs.admin, "GET", "/api/v1/projects/"+project+"/runs/"+run, nil, &r)
		if len(r.Jobs) == 0 || !ok(r) {
			return testutil.Errorf("run %s/%s: %s (%s), jobs %+v", project, run, r.Status, r.Reason, r.Jobs)
		}
		return nil
	})
	return r
}

// projectRunLogs reads a run's log lines through the API.
func projectRunLogs(rs *regServer, project, run string) []string {
	rs.t.Helper()
	return lineTexts(rs.projectLogs(project, run, ""))
}

// stopIsolationRuns stops the projects' runs through their agents and
// ends the job processes, which outlive a killed agent by design.
func stopIsolationRuns(rs *regServer, projects ...string) {
	for _, p := range projects {
		for _, n := range []string{"-1", "-2"} {
			rs.call(rs.admin, "POST", "/api/v1/projects/"+p+"/runs/"+p+n+"/stop", api.StopRunRequest{Abort: true}, nil)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for countProcesses("sleep", "3013") > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // cleanup only: the test has ended
	}
	for _, pid := range processes("sleep", "3013") {
		_ = syscall.Kill(pid, syscall.SIGKILL) // best effort: the process may have just exited
	}
}
