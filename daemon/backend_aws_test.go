package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/plugins/aws"
	"gpud.dev/gpud/plugins/aws/ec2fake"
)

// awsServer starts a server with registration on and the built-in aws
// backend (the static gpud's `plugin serve aws`) on a local EC2 endpoint,
// added to project main as "aws".
func awsServer(t *testing.T) (*testServer, *ec2fake.Server, string) {
	t.Helper()
	bin := staticGpud(t)
	ec2 := ec2fake.Start("us-east-1", "us-west-2")
	t.Cleanup(ec2.Close)
	ts := startServerWith(t, Options{Runtime: "process", NoLocalAgent: true, RegistrationListen: "127.0.0.1:0",
		BuiltinBackends: []string{"aws"}, PluginCommand: []string{bin, "plugin", "serve"}})
	cfg := func(key string) json.RawMessage {
		b, err := json.Marshal(map[string]any{"regions": []string{"us-east-1", "us-west-2"}, "access_key_id": key, "secret_access_key": ec2fake.Secret,
			"endpoint_url": ec2.URL, "ami_lookup": map[string]any{"owners": []string{"self"}, "name": "gpud-*"}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Wrong credentials fail at backend add, not at the first run.
	if code, e := ts.call(ts.admin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "aws", Type: "aws", Config: cfg("AKIAWRONGKEY")}, nil); code == http.StatusOK ||
		!strings.Contains(e.Message, "refused the credentials (AuthFailure)") {
		t.Fatalf("backend add with a wrong key: %d %v", code, e)
	}
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "aws", Type: "aws", Config: cfg(ec2fake.AccessKeyID)}, nil)
	return ts, ec2, bin
}

// TestAWSFleetScalesUpForATwoNodeTaskAndBackToZeroWhenIdle is issue 18's
// autoscaling acceptance on the local EC2 endpoint: a fleet `backends:
// [aws], nodes: 0..3` with regions, instance_types, spot_policy and a
// short idle_duration makes two machines for a 2-node task — the cheapest
// offer its policies allow, g5.xlarge spot in us-west-2 (the cheapest
// offer overall that fits is a T4 in us-east-1) — while the task's reason
// names them; the test plays the booted machines by starting `gpud agent`
// with the arguments of the RunInstances user data; they register into
// the fleet, the task runs on them, and once idle for idle_duration both
// are terminated and deregistered: the fleet is back to 0.
func TestAWSFleetScalesUpForATwoNodeTaskAndBackToZeroWhenIdle(t *testing.T) {
	ts, ec2, bin := awsServer(t)
	if code, e := ts.applyFleet("main", "type: fleet\nname: pool\nbackends: [aws]\nnodes: 0..3\nidle_duration: 5s\nregions: [us-west-2]\n"+
		"instance_types: [g5.xlarge, g5.2xlarge, g6e.xlarge]\nspot_policy: spot\nmax_price: 2\n"); code != http.StatusOK {
		t.Fatalf("apply the fleet: %d %v", code, e)
	}
	train := "type: task\nname: train\nnodes: 2\nfleets: [pool]\ncommands:\n  - echo rank $DSTACK_NODE_RANK of $DSTACK_NODES_NUM\nresources:\n  gpu: 1\n"
	// The plan shows the offers the fleet would provision, with prices.
	var plan api.RunPlan
	ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/runs/plan", yamlApply(train), &plan)
	if len(plan.Offers) == 0 || plan.Offers[0].Instance != "g5.xlarge" || plan.Offers[0].Fleet != "pool" || plan.Offers[0].Price != 0.4225 ||
		!plan.Offers[0].Spot || plan.Offers[0].Region != "us-west-2" {
		t.Fatalf("the plan offers %+v", plan.Offers)
	}
	for _, o := range plan.Offers {
		if o.Region != "us-west-2" || !o.Spot || o.Price > 2 {
			t.Fatalf("the plan offers %+v, outside the fleet's regions, spot_policy or max_price", o)
		}
	}
	ts.submit(train)
	testutil.Eventually(t, time.Minute, func() error {
		r := ts.getRun("train")
		if !strings.Contains(r.WhyPending, "provisioning 2 × g5.xlarge (aws, us-west-2, spot, $0.4225/h) for fleet pool") {
			return fmt.Errorf("train: %s, why pending %q; RunInstances %d", r.Status, r.WhyPending, len(ec2.CallsOf("RunInstances")))
		}
		return nil
	})
	runs := ec2.CallsOf("RunInstances")
	if len(runs) != 2 {
		t.Fatalf("%d RunInstances for a 2-node task", len(runs))
	}
	for _, c := range runs {
		if c.Region != "us-west-2" || c.Params.Get("InstanceType") != "g5.xlarge" || c.Params.Get("InstanceMarketOptions.MarketType") != "spot" {
			t.Fatalf("RunInstances in %s: %v", c.Region, c.Params)
		}
	}
	// Play the booted machines: an agent each, as the user data starts it.
	for _, inst := range ec2.Instances() {
		args, err := aws.ParseUserData(inst.UserData)
		if err != nil {
			t.Fatal(err)
		}
		if args.Server != ts.RegistrationURL() || inst.Tags["gpud:fleet"] != "main/pool" || inst.Tags["gpud:project"] != "main" {
			t.Fatalf("machine %s: user data %+v, tags %v", inst.ID, args, inst.Tags)
		}
		ca := filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(ca, []byte(args.CAPEM), 0o600); err != nil {
			t.Fatal(err)
		}
		testutil.RegisteringAgent{Bin: bin, URL: args.Server, Token: args.Token, CA: ca, FakeGPUs: "1xA10G:24GB", Hostname: args.Hostname}.Start(t)
	}
	// The fleet lists the machines with their price per hour.
	testutil.Eventually(t, time.Minute, func() error {
		f := ts.getFleet("pool")
		if len(f.Instances) != 2 {
			return fmt.Errorf("fleet pool has %d hosts", len(f.Instances))
		}
		for _, i := range f.Instances {
			if i.Price != 0.4225 || i.InstanceType != "g5.xlarge" {
				return fmt.Errorf("host %s: price %v, type %q", i.Name, i.Price, i.InstanceType)
			}
		}
		return nil
	})
	r := ts.waitRunEnd("train", 2*time.Minute)
	if r.Status != "done" {
		t.Fatalf("train ended %s (%s)", r.Status, r.Reason)
	}
	for _, j := range r.Jobs {
		if !strings.HasPrefix(j.Instance, "reg/main/pool/pool-") {
			t.Fatalf("job ran on %q, not a machine of the fleet", j.Instance)
		}
	}
	if logs := ts.logText("train"); !strings.Contains(logs, "rank 0 of 2") || !strings.Contains(logs, "rank 1 of 2") {
		t.Fatalf("logs: %q", logs)
	}
	// Idle for idle_duration: both go, and the fleet is empty again.
	testutil.Eventually(t, time.Minute, func() error {
		f := ts.getFleet("pool")
		var states []string
		for _, i := range ec2.Instances() {
			states = append(states, i.ID+"="+i.State)
		}
		if len(f.Instances) != 0 || len(ec2.CallsOf("TerminateInstances")) != 2 || strings.Contains(strings.Join(states, " "), "running") {
			return fmt.Errorf("fleet pool has %d instances; machines %v", len(f.Instances), states)
		}
		return nil
	})
	if n := len(ec2.CallsOf("RunInstances")); n != 2 {
		t.Fatalf("%d RunInstances after scaling down: the fleet made more machines than it needed", n)
	}
}

// TestAWSFleetMaxPriceBelowEveryOfferLeavesTheRunPendingSayingSo: a
// fleet whose max_price is below every offer that fits makes no machine,
// and its run waits with a reason that names max_price and the cheapest
// offer.
func TestAWSFleetMaxPriceBelowEveryOfferLeavesTheRunPendingSayingSo(t *testing.T) {
	ts, ec2, _ := awsServer(t)
	if code, e := ts.applyFleet("main", "type: fleet\nname: cheap\nbackends: [aws]\nnodes: 0..3\nmax_price: 0.1\n"); code != http.StatusOK {
		t.Fatalf("apply the fleet: %d %v", code, e)
	}
	ts.submit("type: task\nname: frugal\nfleets: [cheap]\ncommands: [echo hi]\nresources:\n  gpu: 1\n")
	testutil.Eventually(t, time.Minute, func() error {
		r := ts.getRun("frugal")
		if r.Status != "pending" || !strings.Contains(r.WhyPending, "fleet cheap cannot provision a machine: every offer that fits is above the fleet's max_price $0.1/h (the cheapest is g4dn.xlarge (aws, us-east-1, $0.526/h))") {
			return fmt.Errorf("frugal: %s, why pending %q", r.Status, r.WhyPending)
		}
		return nil
	})
	if n := len(ec2.CallsOf("RunInstances")); n != 0 {
		t.Fatalf("%d RunInstances above max_price", n)
	}
}

// playMachine starts `gpud agent` as machine inst's user data would.
func playMachine(t *testing.T, bin string, inst ec2fake.Instance) *exec.Cmd {
	t.Helper()
	args, err := aws.ParseUserData(inst.UserData)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte(args.CAPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, _ := testutil.RegisteringAgent{Bin: bin, URL: args.Server, Token: args.Token, CA: ca, FakeGPUs: "1xA10G:24GB", Hostname: args.Hostname}.Start(t)
	return cmd
}

// TestAWSSpotInterruptionRetriesTheRunOnANewMachine: a spot machine of an
// autoscaled fleet that EC2 takes back (state reason
// Server.SpotInstanceTermination) fails its job as interrupted, so a run
// retrying on the interruption event starts again, on a new machine the
// fleet provisions; the interrupted machine is deregistered.
func TestAWSSpotInterruptionRetriesTheRunOnANewMachine(t *testing.T) {
	ts, ec2, bin := awsServer(t)
	if code, e := ts.applyFleet("main", "type: fleet\nname: spot\nbackends: [aws]\nnodes: 0..2\nspot_policy: spot\ninstance_types: [g5.xlarge]\nregions: [us-east-1]\n"); code != http.StatusOK {
		t.Fatalf("apply the fleet: %d %v", code, e)
	}
	ts.submit("type: task\nname: long\nfleets: [spot]\ncommands: [sleep 3007]\nresources:\n  gpu: 1\nretry:\n  on_events: [interruption]\n  duration: 10m\n")
	t.Cleanup(func() {
		ts.call(ts.admin, "POST", "/api/v1/projects/main/runs/long/stop", api.StopRunRequest{Abort: true}, nil)
	})
	machine := func(n int) ec2fake.Instance {
		t.Helper()
		var got []ec2fake.Instance
		testutil.Eventually(t, time.Minute, func() error {
			if got = ec2.Instances(); len(got) < n {
				return fmt.Errorf("%d machines, want %d; run %+v", len(got), n, ts.getRun("long").WhyPending)
			}
			return nil
		})
		return got[n-1]
	}
	first := machine(1)
	vm := playMachine(t, bin, first)
	r := ts.waitRun("long", "running", "", time.Minute)
	if !strings.HasSuffix(r.Jobs[0].Instance, "/"+first.Tags["gpud:instance"]) {
		t.Fatalf("long runs on %q, not on %s", r.Jobs[0].Instance, first.Tags["gpud:instance"])
	}
	// EC2 takes the machine back: the autoscaler reads it from
	// DescribeInstances and fails the job as interrupted; then the machine
	// is gone, with its agent (the job's process outlives a killed agent
	// here, as on a host; the cleanup ends it).
	ec2.Interrupt(first.ID)
	testutil.Eventually(t, time.Minute, func() error {
		ev := ts.eventsText()
		if !strings.Contains(ev, "failed: instance_unreachable: host reg/main/spot/"+first.Tags["gpud:instance"]+" stopped answering (interrupted by the cloud: machine "+first.ID+" (g5.xlarge): Server.SpotInstanceTermination") ||
			!strings.Contains(ev, "retrying after an interruption") {
			return fmt.Errorf("events: %s", ev)
		}
		return nil
	})
	if err := vm.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range processes("sleep", "3007") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	second := machine(2)
	if second.ID == first.ID || !second.Spot {
		t.Fatalf("second machine %+v", second)
	}
	playMachine(t, bin, second)
	testutil.Eventually(t, time.Minute, func() error {
		r := ts.getRun("long")
		var on []string
		for _, j := range r.Jobs {
			on = append(on, j.Instance+"="+j.Status+" ("+j.Reason+")")
		}
		if r.Status != "running" || len(r.Jobs) != 1 || !strings.HasSuffix(r.Jobs[0].Instance, "/"+second.Tags["gpud:instance"]) {
			return fmt.Errorf("long %s: %v (first machine %s, second %s)", r.Status, on, first.Tags["gpud:instance"], second.Tags["gpud:instance"])
		}
		return nil
	})
	for _, i := range ts.getFleet("spot").Instances {
		if strings.HasSuffix(i.Name, first.Tags["gpud:instance"]) {
			t.Fatalf("the interrupted machine is still a host of the fleet: %+v", i)
		}
	}
}

// eventsText is project main's events, one a line (for failure messages).
func (ts *testServer) eventsText() string {
	var evs []api.Event
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/events", nil, &evs)
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n%s %s %s %s: %s", e.Time.Format("15:04:05.000"), e.Kind, e.Subject, e.Status, e.Reason)
	}
	return b.String()
}

// TestProjectAdminCannotPointAnAWSBackendAtTheServersOwnNetwork: a
// project admin who is not a global admin cannot make the aws plugin call
// the server's own host or network through endpoint_url (loopback, the
// link-local metadata address), nor name a file on the server's host;
// each is refused at backend add naming the field, and nothing is stored.
func TestProjectAdminCannotPointAnAWSBackendAtTheServersOwnNetwork(t *testing.T) {
	ts, ec2, _ := awsServer(t)
	padmin := ts.user("padmin")
	ts.must(http.StatusOK, ts.admin, "PUT", "/api/v1/projects/main/members/padmin", api.SetMemberRequest{Role: "admin"}, nil)
	for _, tc := range []struct {
		endpoint string
		words    []string
	}{
		{ec2.URL, []string{"endpoint_url", "loopback", "global admin"}},
		{"http://169.254.169.254/", []string{"endpoint_url", "link-local"}},
		{"http://localhost:1/", []string{"endpoint_url", "localhost resolves to", "loopback"}},
	} {
		cfg, err := json.Marshal(map[string]any{"regions": []string{"us-east-1"}, "access_key_id": ec2fake.AccessKeyID, "secret_access_key": ec2fake.Secret,
			"endpoint_url": tc.endpoint, "ami": ec2fake.AMI})
		if err != nil {
			t.Fatal(err)
		}
		code, e := ts.call(padmin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "mine", Type: "aws", Config: cfg}, nil)
		if code != http.StatusBadRequest {
			t.Fatalf("%s: %d %v", tc.endpoint, code, e)
		}
		for _, w := range tc.words {
			if !strings.Contains(e.Message, w) {
				t.Errorf("%s: %q does not say %q", tc.endpoint, e.Message, w)
			}
		}
	}
	var list []api.Backend
	ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/backends", nil, &list)
	for _, b := range list {
		if b.Name == "mine" {
			t.Fatalf("a refused backend was stored: %+v", b)
		}
	}
}

// TestAWSFleetTriesTheNextOfferOnNoCapacityAndReplacesAMachineThatNeverRegisters:
// the cheapest allowed offer answers InsufficientInstanceCapacity, so the
// fleet makes the next cheapest at once (the reason names it); that
// machine never registers, so after the registration timeout it is
// terminated and its offer backs off too; with both backing off the run
// says so; once capacity is back the first offer is tried again after its
// backoff, and that machine's agent joins and runs the task.
func TestAWSFleetTriesTheNextOfferOnNoCapacityAndReplacesAMachineThatNeverRegisters(t *testing.T) {
	ts, ec2, bin := awsServer(t)
	a := &ts.backends.autoscale
	a.mu.Lock()
	a.registerTimeout = 3 * time.Second
	a.mu.Unlock()
	ec2.NoCapacity("g5.xlarge", true)
	if code, e := ts.applyFleet("main", "type: fleet\nname: pool\nbackends: [aws]\nnodes: 0..1\nregions: [us-east-1]\ninstance_types: [g5.xlarge, g5.2xlarge]\n"); code != http.StatusOK {
		t.Fatalf("apply the fleet: %d %v", code, e)
	}
	ts.submit("type: task\nname: t\nfleets: [pool]\ncommands: [echo done]\nresources:\n  gpu: A10G:1\n")
	testutil.Eventually(t, time.Minute, func() error {
		if r := ts.getRun("t"); !strings.Contains(r.WhyPending, "provisioning 1 × g5.2xlarge (aws, us-east-1, $1.212/h) for fleet pool") {
			return fmt.Errorf("t: why pending %q", r.WhyPending)
		}
		return nil
	})
	var types []string
	for _, c := range ec2.CallsOf("RunInstances") {
		types = append(types, c.Params.Get("InstanceType"))
	}
	if strings.Join(types, ",") != "g5.xlarge,g5.2xlarge" {
		t.Fatalf("RunInstances of %v, want g5.xlarge (no capacity) then g5.2xlarge", types)
	}
	// The g5.2xlarge machine never boots an agent: terminated after the
	// timeout; both offers now back off.
	testutil.Eventually(t, time.Minute, func() error {
		r := ts.getRun("t")
		if len(ec2.CallsOf("TerminateInstances")) != 1 || !strings.Contains(r.WhyPending, "fleet pool cannot provision a machine") {
			return fmt.Errorf("TerminateInstances %d; why pending %q", len(ec2.CallsOf("TerminateInstances")), r.WhyPending)
		}
		return nil
	})
	if got := ec2.Instances(); len(got) != 1 || got[0].State != "terminated" {
		t.Fatalf("machines: %+v", got)
	}
	ec2.NoCapacity("g5.xlarge", false)
	var made ec2fake.Instance
	testutil.Eventually(t, time.Minute, func() error {
		for _, i := range ec2.Instances() {
			if i.Type == "g5.xlarge" {
				made = i
				return nil
			}
		}
		return fmt.Errorf("no g5.xlarge yet; why pending %q", ts.getRun("t").WhyPending)
	})
	playMachine(t, bin, made)
	if r := ts.waitRunEnd("t", 2*time.Minute); r.Status != "done" || !strings.HasSuffix(r.Jobs[0].Instance, "/"+made.Tags["gpud:instance"]) {
		t.Fatalf("t ended %s on %s (%s)", r.Status, r.Jobs[0].Instance, r.Reason)
	}
}

// TestAWSFleetKeepsItsMinimumUpWithoutRunsAndIdle: nodes {min: 1, max: 2}
// makes one machine with no run at all, launched into the fleet's
// capacity reservation, and idle_duration never takes the fleet below its
// minimum.
func TestAWSFleetKeepsItsMinimumUpWithoutRunsAndIdle(t *testing.T) {
	ts, ec2, bin := awsServer(t)
	if code, e := ts.applyFleet("main", "type: fleet\nname: warm\nbackends: [aws]\nnodes: {min: 1, max: 2}\nidle_duration: 1s\ninstance_types: [g6.xlarge]\nreservation: cr-0123456789abcdef0\n"); code != http.StatusOK {
		t.Fatalf("apply the fleet: %d %v", code, e)
	}
	testutil.Eventually(t, time.Minute, func() error {
		if n := len(ec2.Instances()); n != 1 {
			return fmt.Errorf("%d machines", n)
		}
		return nil
	})
	m := ec2.Instances()[0]
	if m.Type != "g6.xlarge" || m.Spot {
		t.Fatalf("the minimum's machine: %+v", m)
	}
	if p := ec2.CallsOf("RunInstances")[0].Params; p.Get("CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId") != "cr-0123456789abcdef0" {
		t.Fatalf("RunInstances without the fleet's reservation: %v", p)
	}
	playMachine(t, bin, m)
	// Idle well past idle_duration, by the machine's own record.
	testutil.Eventually(t, time.Minute, func() error {
		b, err := ts.store.KV().Load(ts.ctx, machineKey(m.Tags["gpud:instance"]))
		if err != nil {
			return err
		}
		var rec scaleMachine
		if err := json.Unmarshal(b, &rec); err != nil {
			return err
		}
		if rec.IdleSince.IsZero() || ts.now().Sub(rec.IdleSince) < 3*time.Second {
			return fmt.Errorf("machine registered %v, idle since %v", rec.RegisteredAt, rec.IdleSince)
		}
		return nil
	})
	if n, f := len(ec2.CallsOf("TerminateInstances")), ts.getFleet("warm"); n != 0 || len(f.Instances) != 1 || len(ec2.Instances()) != 1 {
		t.Fatalf("below min: %d TerminateInstances, %d hosts, %d machines", n, len(f.Instances), len(ec2.Instances()))
	}
}

// TestAWSFleetAdoptsAMachineWhoseCreateAnswerWasLost: EC2 makes the
// machine but every answer to RunInstances is lost (the SDK's retries use
// the same ClientToken, so one machine); the autoscaler keeps the machine
// recorded as unconfirmed instead of forgetting it, adopts it when
// DescribeInstances lists it, and its agent runs the task: no second
// machine, nothing left running unrecorded.
func TestAWSFleetAdoptsAMachineWhoseCreateAnswerWasLost(t *testing.T) {
	ts, ec2, bin := awsServer(t)
	ec2.LoseRunAnswers(3)
	if code, e := ts.applyFleet("main", "type: fleet\nname: pool\nbackends: [aws]\nnodes: 0..2\nidle_duration: 1m\ninstance_types: [g5.xlarge]\nregions: [us-east-1]\n"); code != http.StatusOK {
		t.Fatalf("apply the fleet: %d %v", code, e)
	}
	ts.submit("type: task\nname: t\nfleets: [pool]\ncommands: [echo done]\nresources:\n  gpu: 1\n")
	testutil.Eventually(t, time.Minute, func() error {
		r := ts.getRun("t")
		if len(ec2.CallsOf("RunInstances")) < 3 || !strings.Contains(r.WhyPending, "provisioning 1 × g5.xlarge (aws, us-east-1, $1.006/h) for fleet pool") {
			return fmt.Errorf("RunInstances %d; why pending %q", len(ec2.CallsOf("RunInstances")), r.WhyPending)
		}
		return nil
	})
	made := ec2.Instances()
	if len(made) != 1 {
		t.Fatalf("%d machines for one create", len(made))
	}
	playMachine(t, bin, made[0])
	if r := ts.waitRunEnd("t", 2*time.Minute); r.Status != "done" {
		t.Fatalf("t ended %s (%s)", r.Status, r.Reason)
	}
	if n := len(ec2.Instances()); n != 1 {
		t.Fatalf("%d machines: the lost create was made again", n)
	}
}
