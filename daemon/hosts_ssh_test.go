package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// staticGpud is the gpud uploaded to SSH hosts: prebuilt when
// GPUD_TEST_STATIC_BINARY names one, else built (CGO_ENABLED=0) here.
func staticGpud(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv(testutil.StaticGpudEnv); bin != "" {
		return bin
	}
	bin, err := testutil.BuildStaticGpud(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func sshFleetYAML(identity string, hosts ...*testutil.SSHD) string {
	ips := make([]string, len(hosts))
	for i, h := range hosts {
		ips[i] = h.IP
	}
	return fmt.Sprintf("type: fleet\nname: lab\nplacement: cluster\nssh_config:\n  user: root\n  identity_file: %s\n  hosts: [%s]\n",
		identity, strings.Join(ips, ", "))
}

// TestSSHFleetApplyProvisionsReappliesAndDeletesHosts drives the server's
// SSH fleet wiring through its HTTP API against three real sshd hosts:
// apply provisions all three (agents reached through SSH report their
// fake GPUs as instances), a GPU task runs on one of them through SSH,
// re-applying without one tears that host down,
// and deleting the fleet removes the agents from the rest.
func TestSSHFleetApplyProvisionsReappliesAndDeletesHosts(t *testing.T) {
	bin := staticGpud(t)
	image := testutil.SSHDImage(t)
	nw := testutil.NewDockerNetwork(t)
	key := testutil.NewClientKey(t, t.TempDir())
	hosts := []*testutil.SSHD{
		testutil.StartSSHD(t, image, nw, key.Public), testutil.StartSSHD(t, image, nw, key.Public), testutil.StartSSHD(t, image, nw, key.Public),
	}
	ts := startServerWith(t, Options{Runtime: "process", AgentBinary: bin,
		SSHAgentArgs: []string{"--runtime", "process", "--fake-gpus", "2xH100:80GB"}})
	apply := func(yaml string) {
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply", api.ApplyRequest{ConfigurationYAML: yaml}, nil)
	}
	instances := func(want int) []api.Instance {
		var fleet api.Fleet
		testutil.Eventually(t, 60*time.Second, func() error {
			ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/fleets/lab", nil, &fleet)
			if len(fleet.Instances) != want {
				return testutil.Errorf("%d instances, want %d", len(fleet.Instances), want)
			}
			return nil
		})
		return fleet.Instances
	}
	agentRunning := func(h *testutil.SSHD) bool {
		return strings.Contains(h.Exec(t, "ps -o args"), "gpud agent")
	}

	apply(sshFleetYAML(key.IdentityFile, hosts...))
	var names []string
	for _, inst := range instances(3) {
		if inst.Backend != "ssh" || inst.Resources.GPUs != 2 || inst.Resources.GPUName != "H100" {
			t.Errorf("instance %s: backend %q, %v GPUs %q; want ssh, 2 H100", inst.Name, inst.Backend, inst.Resources.GPUs, inst.Resources.GPUName)
		}
		names = append(names, inst.Hostname)
	}
	for _, h := range hosts {
		if !slices.Contains(names, h.Name) {
			t.Errorf("host %s is not an instance (have %v)", h.Name, names)
		}
		if _, err := ts.Store().KV().Load(context.Background(), "ssh/known_hosts/"+h.Addr()); err != nil {
			t.Errorf("host key of %s not pinned: %v", h.Addr(), err)
		}
	}

	// A GPU task can only go to an SSH host (the local agent has none):
	// the server starts it through SSH and reads its exit the same way.
	ts.must(http.StatusCreated, ts.admin, "POST", "/api/v1/projects/main/runs/apply",
		yamlApply("type: task\nname: on-ssh\ncommands: [hostname]\nresources:\n  gpu: 1\n"), nil)
	testutil.Eventually(t, 60*time.Second, func() error {
		var run api.Run
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/runs/on-ssh", nil, &run)
		if run.Status != "done" || len(run.Jobs) != 1 || !strings.Contains(run.Jobs[0].Instance, "lab") {
			return testutil.Errorf("run %s, jobs %+v; want done on an ssh host", run.Status, run.Jobs)
		}
		return nil
	})
	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/main/runs/on-ssh", nil, nil)

	apply(sshFleetYAML(key.IdentityFile, hosts[0], hosts[1]))
	instances(2)
	testutil.Eventually(t, 20*time.Second, func() error {
		if agentRunning(hosts[2]) {
			return testutil.Errorf("the removed host still runs the agent")
		}
		return nil
	})

	ts.must(http.StatusNoContent, ts.admin, "DELETE", "/api/v1/projects/main/fleets/lab", nil, nil)
	for _, h := range hosts[:2] {
		if agentRunning(h) {
			t.Errorf("host %s still runs the agent after the fleet was deleted", h.Name)
		}
	}
}

// TestSSHFleetHostFailuresBecomeInstanceEvents: a killed host is recorded
// unreachable within the configured bound, and a host whose key changed
// is refused at provisioning with both fingerprints in the event.
func TestSSHFleetHostFailuresBecomeInstanceEvents(t *testing.T) {
	bin := staticGpud(t)
	image := testutil.SSHDImage(t)
	nw := testutil.NewDockerNetwork(t)
	key := testutil.NewClientKey(t, t.TempDir())
	hosts := []*testutil.SSHD{testutil.StartSSHD(t, image, nw, key.Public), testutil.StartSSHD(t, image, nw, key.Public)}
	ts := startServerWith(t, Options{Runtime: "process", AgentBinary: bin,
		SSHAgentArgs: []string{"--runtime", "process", "--fake-gpus", "1xH100:80GB"},
		SSHHealth:    clusterHealth()})
	// Pin the second host's key, then change it, as a reinstall would.
	if err := ts.Store().KV().Store(context.Background(), "ssh/known_hosts/"+hosts[1].Addr(), hosts[1].HostKey.Marshal()); err != nil {
		t.Fatal(err)
	}
	pinned := ssh.FingerprintSHA256(hosts[1].HostKey)
	hosts[1].ChangeHostKey(t)
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply",
		api.ApplyRequest{ConfigurationYAML: sshFleetYAML(key.IdentityFile, hosts...)}, nil)
	event := func(subject, status string) api.Event {
		var found api.Event
		testutil.Eventually(t, 60*time.Second, func() error {
			var events []api.Event
			ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/events", nil, &events)
			for _, e := range events {
				if e.Kind == "instances" && strings.HasSuffix(e.Subject, subject) && e.Status == status {
					found = e
					return nil
				}
			}
			return testutil.Errorf("no %s event for %s in %d events", status, subject, len(events))
		})
		return found
	}
	refused := event("/"+hosts[1].IP, "failed")
	for _, want := range []string{"host key", pinned, ssh.FingerprintSHA256(hosts[1].HostKey)} {
		if !strings.Contains(refused.Reason, want) {
			t.Errorf("refusal %q does not name %q", refused.Reason, want)
		}
	}
	event("/"+hosts[0].IP, "ready")
	hosts[0].Kill(t)
	event("/"+hosts[0].IP, "unreachable")
	// `gpud fleet list` shows it through the instance's reason.
	testutil.Eventually(t, 10*time.Second, func() error {
		var fleet api.Fleet
		ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/fleets/lab", nil, &fleet)
		for _, in := range fleet.Instances {
			if in.Hostname == hosts[0].Name && strings.HasPrefix(in.Reason, "unreachable: ") {
				return nil
			}
		}
		return testutil.Errorf("no unreachable instance in %+v", fleet.Instances)
	})
}

// BenchmarkApplySSHFleetThreeHostsReady measures issue 7's figure: from
// `POST fleets/apply` (what `gpud apply fleet.yml` sends) to all three
// hosts listed as instances with their GPUs. Fresh hosts each round: the
// binary is uploaded to all three.
//
//	go test -run '^$' -bench ApplySSHFleetThreeHostsReady -benchtime 3x ./daemon/
func BenchmarkApplySSHFleetThreeHostsReady(b *testing.B) {
	bin := os.Getenv(testutil.StaticGpudEnv)
	if bin == "" {
		var err error
		if bin, err = testutil.BuildStaticGpud(b.TempDir()); err != nil {
			b.Fatal(err)
		}
	}
	image := testutil.SSHDImage(b)
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		nw := testutil.NewDockerNetwork(b)
		key := testutil.NewClientKey(b, b.TempDir())
		hosts := []*testutil.SSHD{testutil.StartSSHD(b, image, nw, key.Public), testutil.StartSSHD(b, image, nw, key.Public), testutil.StartSSHD(b, image, nw, key.Public)}
		ts := startServerWith(b, Options{Runtime: "process", AgentBinary: bin,
			SSHAgentArgs: []string{"--runtime", "process", "--fake-gpus", "8xH100:80GB"}})
		b.StartTimer()
		start := time.Now()
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/fleets/apply",
			api.ApplyRequest{ConfigurationYAML: sshFleetYAML(key.IdentityFile, hosts...)}, nil)
		for {
			var fleet api.Fleet
			ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/fleets/lab", nil, &fleet)
			if len(fleet.Instances) == 3 {
				break
			}
			if time.Since(start) > 2*time.Minute {
				b.Fatalf("after %s only %d of 3 hosts are instances: %+v", time.Since(start), len(fleet.Instances), fleet.Instances)
			}
			time.Sleep(20 * time.Millisecond)
		}
		total += time.Since(start)
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-apply-to-3-ready")
}
