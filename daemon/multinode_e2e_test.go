package daemon

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/plugins/sshfleet"
)

// sshCluster is a server with an SSH fleet "lab" (placement: cluster) of
// real sshd hosts, each running the uploaded static gpud agent with the
// process runtime and fake GPUs.
type sshCluster struct {
	*testServer
	bin   string
	hosts []*testutil.SSHD
}

// clusterHealth is a short failure bound for tests: a silent host is
// unreachable after at most 1 s + 5 s. Shorter (it was 300 ms + 1.5 s), a
// loaded machine's slow SSH round trips made live hosts look lost.
func clusterHealth() sshfleet.HealthConfig {
	return sshfleet.HealthConfig{KeepaliveInterval: time.Second, UnreachableAfter: 5 * time.Second}
}

func startSSHCluster(t *testing.T, n int, gpus string) *sshCluster {
	t.Helper()
	bin := staticGpud(t)
	image := testutil.SSHDImage(t)
	nw := testutil.NewDockerNetwork(t)
	key := testutil.NewClientKey(t, t.TempDir())
	c := &sshCluster{bin: bin}
	for range n {
		c.hosts = append(c.hosts, testutil.StartSSHD(t, image, nw, key.Public))
	}
	c.testServer = startServerWith(t, Options{Runtime: "process", AgentBinary: bin, SSHHealth: clusterHealth(),
		SSHAgentArgs: []string{"--runtime", "process", "--fake-gpus", gpus}})
	c.must(http.StatusOK, c.admin, "POST", "/api/v1/projects/main/fleets/apply",
		api.ApplyRequest{ConfigurationYAML: sshFleetYAML(key.IdentityFile, c.hosts...)}, nil)
	testutil.Eventually(t, 60*time.Second, func() error {
		var fleet api.Fleet
		c.must(http.StatusOK, c.admin, "GET", "/api/v1/projects/main/fleets/lab", nil, &fleet)
		if len(fleet.Instances) != n {
			return testutil.Errorf("%d hosts ready, want %d", len(fleet.Instances), n)
		}
		return nil
	})
	return c
}

// hostOf returns the test host an instance id names.
func (c *sshCluster) hostOf(t *testing.T, instance string) *testutil.SSHD {
	t.Helper()
	for _, h := range c.hosts {
		if strings.HasSuffix(instance, "/"+h.IP) { // sshInstanceID ends with the host
			return h
		}
	}
	t.Fatalf("instance %q is none of the test hosts", instance)
	return nil
}

func (c *sshCluster) run(t *testing.T, name string) api.Run {
	t.Helper()
	var run api.Run
	c.must(http.StatusOK, c.admin, "GET", "/api/v1/projects/main/runs/"+name, nil, &run)
	return run
}

// TestSSHClusterRunsATwoNodeTaskWhoseNodesReachEachOther: three sshd
// hosts provisioned as one cluster fleet; a two-node task lands on two of
// them, each node sees its rank, the node count, the master's address,
// both nodes' addresses, the MPI hostfile and its GPUs, and the worker
// sends a line to the master over the hosts' network. `gpud fleet list`
// (the real binary) shows the three hosts.
func TestSSHClusterRunsATwoNodeTaskWhoseNodesReachEachOther(t *testing.T) {
	c := startSSHCluster(t, 3, "2xH100:80GB")
	task := `type: task
name: pair
nodes: 2
resources:
  gpu: 2
commands:
  - 'echo "ENV rank=$DSTACK_NODE_RANK nodes=$DSTACK_NODES_NUM master=$DSTACK_MASTER_NODE_IP ips=$(echo $DSTACK_NODES_IPS | tr " " ,) gpus_per_node=$DSTACK_GPUS_PER_NODE gpus=$DSTACK_GPUS_NUM gpud_rank=$GPUD_NODE_RANK"'
  - 'sed "s/^/HOSTFILE$DSTACK_NODE_RANK /" $DSTACK_MPI_HOSTFILE'
  - 'if [ "$DSTACK_NODE_RANK" = 0 ]; then printf "#!/bin/sh\nexec cat > /tmp/pair-got\n" > /tmp/pair-recv && chmod +x /tmp/pair-recv && nc -l -p 7777 -e /tmp/pair-recv && echo "MASTER got $(cat /tmp/pair-got)"; else until echo "hello from rank $DSTACK_NODE_RANK" | nc $DSTACK_MASTER_NODE_IP 7777; do sleep 0.2; done; fi'
`
	c.must(http.StatusCreated, c.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(task), nil)
	var run api.Run
	testutil.Eventually(t, 60*time.Second, func() error {
		run = c.run(t, "pair")
		if run.Status == "failed" {
			t.Fatalf("run failed: %s (jobs %+v, logs %q)", run.Reason, run.Jobs, c.runLogs("pair"))
		}
		if run.Status != "done" {
			return testutil.Errorf("run %s (%s)", run.Status, run.Reason)
		}
		return nil
	})
	if len(run.Jobs) != 2 {
		t.Fatalf("jobs %+v, want 2", run.Jobs)
	}
	ips := make([]string, 2)
	for _, j := range run.Jobs {
		ips[j.NodeRank] = c.hostOf(t, j.Instance).IP
	}
	if ips[0] == ips[1] {
		t.Fatalf("both nodes on %s; want two hosts (each has 2 GPUs, each node asks 2)", ips[0])
	}
	logs := strings.Join(c.runLogs("pair"), "\n")
	for rank := range 2 {
		want := []string{
			fmt.Sprintf("ENV rank=%d nodes=2 master=%s ips=%s,%s gpus_per_node=2 gpus=4 gpud_rank=%d", rank, ips[0], ips[0], ips[1], rank),
			fmt.Sprintf("HOSTFILE%d %s slots=2\nHOSTFILE%d %s slots=2", rank, ips[0], rank, ips[1]),
		}
		for _, w := range want {
			if !strings.Contains(logs, w) {
				t.Errorf("logs lack %q:\n%s", w, logs)
			}
		}
	}
	if !strings.Contains(logs, "MASTER got hello from rank 1") {
		t.Errorf("the master did not hear from the worker over the network:\n%s", logs)
	}

	cmd := exec.Command(c.bin, "fleet", "list")
	cmd.Env = append(os.Environ(), "GPUD_HOME="+t.TempDir(), "GPUD_SERVER="+c.URL(), "GPUD_TOKEN="+c.admin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpud fleet list: %v: %s", err, out)
	}
	for _, h := range c.hosts {
		row := regexp.MustCompile(`(?m)^lab\s+` + regexp.QuoteMeta(h.Name) + `\s+ssh\s+\S+\s+2×H100:80GB\s+2\s.*\sok`)
		if !row.Match(out) {
			t.Errorf("gpud fleet list has no healthy row for host %s with 2×H100 free:\n%s", h.Name, out)
		}
	}
}

// TestSSHClusterLostNodeRestartsTheWholeGang: when the host of one node
// of a running two-node task dies, the other node is stopped too (the
// gang cannot go on without it) and the retry starts both nodes again on
// the two hosts left.
func TestSSHClusterLostNodeRestartsTheWholeGang(t *testing.T) {
	c := startSSHCluster(t, 3, "2xH100:80GB")
	task := "type: task\nname: gang\nnodes: 2\nresources:\n  gpu: 2\ncommands: [sleep 3003]\nretry:\n  on_events: [interruption]\n  duration: 10m\n"
	c.must(http.StatusCreated, c.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(task), nil)
	bothRunning := func(exclude string) []api.Job {
		t.Helper()
		var jobs []api.Job
		testutil.Eventually(t, 60*time.Second, func() error {
			jobs = c.run(t, "gang").Jobs
			if len(jobs) != 2 || jobs[0].Status != "running" || jobs[1].Status != "running" ||
				jobs[0].Instance == exclude || jobs[1].Instance == exclude {
				return testutil.Errorf("jobs %+v, want both nodes running off %q", jobs, exclude)
			}
			return nil
		})
		return jobs
	}
	first := bothRunning("")
	c.hostOf(t, first[1].Instance).Kill(t)
	survivor := c.hostOf(t, first[0].Instance)
	testutil.Eventually(t, 20*time.Second, func() error {
		j, err := c.Store().Jobs().Get(first[0].ID)
		if err != nil || j.Status != "terminated" || !strings.Contains(j.Reason, ReasonInstanceUnreachable) {
			return testutil.Errorf("surviving node %s (%s), want terminated because its peer was lost", j.Status, j.Reason)
		}
		return nil
	})
	second := bothRunning(first[1].Instance)
	if second[0].ID == first[0].ID || second[1].ID == first[1].ID {
		t.Errorf("jobs %+v are not a new attempt", second)
	}
	if n := strings.Count(survivor.Exec(t, "ps -o args"), "sleep 3003"); n != 1 {
		t.Errorf("%d copies of the task on the surviving host, want 1 (the new attempt's)", n)
	}
}

// TestSSHClusterHostFailureRetriesElsewhereAndStopsTheStaleJob: a task
// with a retry policy runs on one host of three. Killing that host fails
// the job with instance_unreachable within the bound and the run retries
// on another host; partitioning that one does the same, and when the
// partition heals the job it still ran there is stopped, so only the
// latest attempt runs.
func TestSSHClusterHostFailureRetriesElsewhereAndStopsTheStaleJob(t *testing.T) {
	c := startSSHCluster(t, 3, "1xH100:80GB")
	task := "type: task\nname: survivor\ncommands: [sleep 3001]\nresources:\n  gpu: 1\nretry:\n  on_events: [error]\n  duration: 10m\n"
	c.must(http.StatusCreated, c.admin, "POST", "/api/v1/projects/main/runs/apply", yamlApply(task), nil)
	// bound is the detection bound plus the time to record the failure.
	bound := clusterHealth().KeepaliveInterval + clusterHealth().UnreachableAfter + 5*time.Second

	running := func(exclude ...string) api.Job {
		t.Helper()
		var job api.Job
		testutil.Eventually(t, 60*time.Second, func() error {
			for _, j := range c.run(t, "survivor").Jobs {
				if j.Status == "running" && !slices.Contains(exclude, j.Instance) {
					job = j
					return nil
				}
			}
			return testutil.Errorf("no job running outside %v", exclude)
		})
		return job
	}
	failedUnreachable := func(id string) {
		t.Helper()
		testutil.Eventually(t, bound, func() error {
			// The run shows its current attempt; the store keeps the old one.
			j, err := c.Store().Jobs().Get(id)
			if err != nil || j.Status != "failed" || !strings.HasPrefix(j.Reason, ReasonInstanceUnreachable) {
				return testutil.Errorf("job %s is %s (%s), want failed with %s", id, j.Status, j.Reason, ReasonInstanceUnreachable)
			}
			return nil
		})
		var events []api.Event
		c.must(http.StatusOK, c.admin, "GET", "/api/v1/projects/main/events", nil, &events)
		if !slices.ContainsFunc(events, func(e api.Event) bool {
			return e.Kind == "jobs" && e.Subject == id && e.Status == "failed" && strings.HasPrefix(e.Reason, ReasonInstanceUnreachable)
		}) {
			t.Errorf("no failed event with reason %s for job %s", ReasonInstanceUnreachable, id)
		}
	}
	sleeping := func(h *testutil.SSHD) bool { return strings.Contains(h.Exec(t, "ps -o args"), "sleep 3001") }

	first := running()
	killed := c.hostOf(t, first.Instance)
	killed.Kill(t)
	failedUnreachable(first.ID)
	second := running(first.Instance)

	partitioned := c.hostOf(t, second.Instance)
	partitioned.Disconnect(t)
	failedUnreachable(second.ID)
	third := running(first.Instance, second.Instance)
	if !sleeping(partitioned) {
		t.Fatalf("the partitioned host's job should still run there until the host is back")
	}
	partitioned.Reconnect(t)
	testutil.Eventually(t, 30*time.Second, func() error {
		if sleeping(partitioned) {
			return testutil.Errorf("the moved job still runs on the host that came back")
		}
		return nil
	})
	// The event is recorded after the stop is sent, so it may follow the
	// job's end: wait for it.
	testutil.Eventually(t, 30*time.Second, func() error {
		var events []api.Event
		c.must(http.StatusOK, c.admin, "GET", "/api/v1/projects/main/events", nil, &events)
		if !slices.ContainsFunc(events, func(e api.Event) bool {
			// the job by its name and attempt (second.ID ends -aN)
			named := "stopped job " + second.Name + " (attempt " + second.ID[strings.LastIndex(second.ID, "-a")+2:] + "):"
			return e.Kind == "instances" && e.Subject == second.Instance && e.Status == "stale_job_stopped" && strings.Contains(e.Reason, named)
		}) {
			var seen []string
			for _, e := range events {
				seen = append(seen, e.Kind+" "+e.Subject+" "+e.Status+": "+e.Reason)
			}
			return testutil.Errorf("no stale_job_stopped event naming job %s on %s in the events:\n%s", second.ID, second.Instance, strings.Join(seen, "\n"))
		}
		return nil
	})
	if !sleeping(c.hostOf(t, third.Instance)) {
		t.Errorf("the current attempt no longer runs on %s", third.Instance)
	}
	if got := c.run(t, "survivor"); got.Status != "running" {
		t.Errorf("run %s (%s), want running on its third host", got.Status, got.Reason)
	}
}
