package aws

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/plugins/aws/ec2fake"
)

func testConfig(endpoint string) Config {
	return Config{Regions: []string{"us-east-1", "us-west-2"}, AccessKeyID: ec2fake.AccessKeyID, SecretAccessKey: ec2fake.Secret,
		EndpointURL: endpoint, AMILookup: &AMILookup{Owners: []string{"self"}, Name: "gpud-*"}, TimeoutSeconds: 10}
}

func newBackend(t *testing.T, cfg Config) *Backend {
	t.Helper()
	b, err := New(cfg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func TestCatalogParsesAndOffersAreCheapestFirstPerRegionAndMarket(t *testing.T) {
	cat, err := catalog()
	if err != nil {
		t.Fatal(err)
	}
	if len(cat) < 10 {
		t.Fatalf("catalog has %d types", len(cat))
	}
	for _, e := range cat {
		if e.GPUs == 0 || e.OnDemand <= 0 || e.Spot <= 0 || e.Spot >= e.OnDemand {
			t.Errorf("catalog %s: %+v", e.Type, e)
		}
	}
	b := newBackend(t, testConfig("http://127.0.0.1:1"))
	all, err := b.Offers(context.Background(), plugins.OfferQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(cat)*2*2 {
		t.Fatalf("%d offers, want every type in 2 regions, on demand and spot", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Price < all[i-1].Price {
			t.Fatalf("offers not cheapest first at %d: %v then %v", i, all[i-1], all[i])
		}
	}
	no := false
	got, err := b.Offers(context.Background(), plugins.OfferQuery{GPUName: "a10g", GPUs: 4, Spot: &no, Region: "us-west-2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Instance != "g5.12xlarge" || got[0].Price != 5.672 || got[0].Spot || got[0].Region != "us-west-2" || got[0].Resources.GPUs != 4 {
		t.Fatalf("A10G x4 on demand in us-west-2: %+v", got)
	}
}

func TestCheckRefusesWrongCredentialsEndpointAndImage(t *testing.T) {
	ec2 := ec2fake.Start("us-east-1", "us-west-2")
	defer ec2.Close()
	ctx := context.Background()
	if err := newBackend(t, testConfig(ec2.URL)).Check(ctx); err != nil {
		t.Fatalf("good configuration: %v", err)
	}
	bad := testConfig(ec2.URL)
	bad.AccessKeyID = "AKIAWRONG"
	if err := newBackend(t, bad).Check(ctx); err == nil || !strings.Contains(err.Error(), "refused the credentials (AuthFailure)") {
		t.Fatalf("wrong key: %v", err)
	}
	down := testConfig("http://127.0.0.1:1")
	down.TimeoutSeconds = 3
	if err := newBackend(t, down).Check(ctx); err == nil || !strings.Contains(err.Error(), "cannot reach endpoint_url http://127.0.0.1:1") {
		t.Fatalf("wrong endpoint: %v", err)
	}
	region := testConfig(ec2.URL)
	region.Regions = []string{"eu-north-1"}
	if err := newBackend(t, region).Check(ctx); err == nil || !strings.Contains(err.Error(), "eu-north-1 is not enabled") {
		t.Fatalf("region: %v", err)
	}
	img := testConfig(ec2.URL)
	img.Regions, img.AMILookup, img.AMI = []string{"us-east-1"}, nil, "ami-00000000000000000"
	if err := newBackend(t, img).Check(ctx); err == nil || !strings.Contains(err.Error(), "ami-00000000000000000 does not exist") {
		t.Fatalf("image: %v", err)
	}
	for _, c := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Regions = nil }, "regions: at least one"},
		{func(c *Config) { c.SecretAccessKey = "" }, "access_key_id and secret_access_key are required"},
		{func(c *Config) { c.SubnetID = "subnet-1" }, "use one region per backend"},
		{func(c *Config) { c.AMILookup = nil }, "no image"},
		{func(c *Config) { c.EndpointURL = "ftp://x" }, "endpoint_url"},
	} {
		cfg := testConfig(ec2.URL)
		c.mut(&cfg)
		if _, err := New(cfg, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want %q, got %v", c.want, err)
		}
	}
}

func TestCreateInstanceBootsTheAgentTagsItAndIsIdempotent(t *testing.T) {
	ec2 := ec2fake.Start("us-east-1", "us-west-2")
	defer ec2.Close()
	ctx := context.Background()
	b := newBackend(t, testConfig(ec2.URL))
	offers, err := b.Offers(ctx, plugins.OfferQuery{GPUName: "A10G", Region: "us-west-2"})
	if err != nil || len(offers) == 0 {
		t.Fatal(offers, err)
	}
	req := plugins.InstanceRequest{ID: "main-pool-1", Project: "main", Offer: offers[0],
		Register: plugins.RegistrationSettings{ServerURL: "https://10.1.2.3:7443", Token: "gpudreg_abc", CAPEM: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", Fleet: "fleet-1"}}
	inst, err := b.CreateInstance(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if inst.ID == "" || inst.Region != "us-west-2" || inst.RequestID != "main-pool-1" || inst.Price != offers[0].Price || inst.Spot != offers[0].Spot {
		t.Fatalf("instance: %+v (offer %+v)", inst, offers[0])
	}
	again, err := b.CreateInstance(ctx, req)
	if err != nil || again.ID != inst.ID {
		t.Fatalf("a second create of the same id: %+v, %v", again, err)
	}
	runs := ec2.CallsOf("RunInstances")
	if len(runs) != 1 {
		t.Fatalf("%d RunInstances for one id", len(runs))
	}
	p := runs[0].Params
	if runs[0].Region != "us-west-2" || p.Get("InstanceType") != offers[0].Instance || p.Get("ImageId") != ec2fake.AMI || p.Get("ClientToken") == "" {
		t.Fatalf("RunInstances: %v", p)
	}
	if offers[0].Spot != (p.Get("InstanceMarketOptions.MarketType") == "spot") {
		t.Fatalf("market of %+v: %v", offers[0], p)
	}
	made := ec2.Instances()[0]
	for k, v := range map[string]string{tagServer: "gpud", tagInstance: "main-pool-1", tagFleet: "fleet-1", tagProject: "main"} {
		if made.Tags[k] != v {
			t.Errorf("tag %s = %q, want %q", k, made.Tags[k], v)
		}
	}
	args, err := ParseUserData(made.UserData)
	if err != nil {
		t.Fatal(err)
	}
	if args.Server != req.Register.ServerURL || args.Token != req.Register.Token || args.Hostname != "main-pool-1" || args.CAPEM != req.Register.CAPEM {
		t.Fatalf("user data gives %+v", args)
	}
	if !strings.Contains(made.UserData, "agent --server \"$GPUD_SERVER\" --token-file /etc/gpud/registration-token --server-ca /etc/gpud/server-ca.pem") {
		t.Fatalf("user data does not start the agent:\n%s", made.UserData)
	}

	// A spot offer is a spot request.
	var spot = offers[0]
	for _, o := range offers {
		if o.Spot {
			spot = o
			break
		}
	}
	req2 := req
	req2.ID, req2.Offer = "main-pool-2", spot
	si, err := b.CreateInstance(ctx, req2)
	if err != nil || !si.Spot {
		t.Fatalf("spot: %+v %v", si, err)
	}
	if got := ec2.CallsOf("RunInstances")[1].Params.Get("InstanceMarketOptions.MarketType"); got != "spot" {
		t.Fatalf("spot market type %q", got)
	}

	// An interruption is reported; terminate by gpud id or EC2 id.
	if !ec2.Interrupt(si.ID) {
		t.Fatal("no such instance to interrupt")
	}
	list, err := b.Instances(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("instances: %+v %v", list, err)
	}
	for _, i := range list {
		if i.RequestID == "main-pool-2" && (!i.Interrupted || i.State != "terminated" || !strings.Contains(i.Reason, "Server.SpotInstanceTermination")) {
			t.Fatalf("interrupted: %+v", i)
		}
		if i.RequestID == "main-pool-1" && (i.Interrupted || i.State != "running") {
			t.Fatalf("running: %+v", i)
		}
	}
	if err := b.TerminateInstance(ctx, "main-pool-1"); err != nil {
		t.Fatal(err)
	}
	if err := b.TerminateInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(ec2.CallsOf("TerminateInstances")); n != 1 {
		t.Fatalf("%d TerminateInstances: a terminated machine is not terminated again", n)
	}
	list, err = b.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range list {
		if i.RequestID == "main-pool-1" && (i.State != "terminated" || i.Interrupted) {
			t.Fatalf("terminated by gpud: %+v", i)
		}
	}
}

func TestCreateInstanceReportsNoCapacity(t *testing.T) {
	ec2 := ec2fake.Start("us-east-1")
	defer ec2.Close()
	cfg := testConfig(ec2.URL)
	cfg.Regions = []string{"us-east-1"}
	b := newBackend(t, cfg)
	ec2.NoCapacity("g5.xlarge", true)
	o := catalogOffer(t, b, "g5.xlarge")
	_, err := b.CreateInstance(context.Background(), plugins.InstanceRequest{ID: "x", Offer: o,
		Register: plugins.RegistrationSettings{ServerURL: "https://10.0.0.1:1", Token: "t", Fleet: "f"}})
	if !plugins.IsNoCapacity(err) || !strings.Contains(err.Error(), "InsufficientInstanceCapacity") {
		t.Fatalf("no capacity: %v", err)
	}
	if n := len(ec2.CallsOf("RunInstances")); n != 1 {
		t.Fatalf("%d RunInstances: a no-capacity answer is not retried by the SDK (the server tries another offer)", n)
	}
}

func catalogOffer(t *testing.T, b *Backend, typ string) api.Offer {
	t.Helper()
	no := false
	offers, err := b.Offers(context.Background(), plugins.OfferQuery{Spot: &no})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offers {
		if o.Instance == typ {
			return o
		}
	}
	t.Fatalf("no offer of %s", typ)
	return api.Offer{}
}
