package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/kubetest"
	"gpud.dev/gpud/internal/testutil"
	"gpud.dev/gpud/plugins/aws/ec2fake"
	"gpud.dev/gpud/plugins/slurm/slurmtest"
)

// BenchmarkOffersQueryWithAllBackends: `gpud offer` (GET .../offers?gpu=1)
// through the server, which asks every backend of the project at once:
// the external test plugin, then with the built-in aws backend (on the
// local EC2 endpoint: its offers come from the catalog, no EC2 call),
// then Kubernetes (a real kube-apiserver with KWOK nodes), then Slurm (the
// real slurmrestd of .ci/slurm.sh, when GPUD_TEST_SLURMRESTD names it).
func BenchmarkOffersQueryWithAllBackends(b *testing.B) {
	bin := os.Getenv(testutil.StaticGpudEnv)
	if bin == "" {
		var err error
		if bin, err = testutil.BuildStaticGpud(b.TempDir()); err != nil {
			b.Fatal(err)
		}
	}
	ts := startBackendServerWith(b, 8, Options{NoLocalAgent: true, BuiltinBackends: []string{"aws", "kubernetes", "slurm"}, PluginCommand: []string{bin, "plugin", "serve"}})
	add := func(name, typ string, cfg map[string]any) {
		raw, err := json.Marshal(cfg)
		if err != nil {
			b.Fatal(err)
		}
		ts.must(http.StatusOK, ts.admin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: name, Type: typ, Config: raw}, nil)
	}
	query := func(b *testing.B, label string) {
		b.Run(label, func(b *testing.B) {
			offers := 0
			for b.Loop() {
				var out []api.Offer
				ts.must(http.StatusOK, ts.admin, "GET", "/api/v1/projects/main/offers?gpu=1", nil, &out)
				offers += len(out)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/query")
			b.ReportMetric(float64(offers)/float64(b.N), "offers/query")
		})
	}
	query(b, "backends=test")
	ec2 := ec2fake.Start("us-east-1", "us-west-2")
	b.Cleanup(ec2.Close)
	add("aws", "aws", map[string]any{"regions": []string{"us-east-1", "us-west-2"}, "access_key_id": ec2fake.AccessKeyID,
		"secret_access_key": ec2fake.Secret, "endpoint_url": ec2.URL, "ami_lookup": map[string]any{"owners": []string{"self"}, "name": "gpud-*"}})
	query(b, "backends=test,aws")
	kc := kubetest.StartWithT(b, kubetest.Options{})
	add("k8s", "kubernetes", map[string]any{"kubeconfig": kc.Kubeconfig, "namespace": "gpud"})
	query(b, "backends=test,aws,kubernetes")
	if os.Getenv("GPUD_TEST_SLURMRESTD") == "" {
		b.Log("no Slurm (GPUD_TEST_SLURMRESTD unset): the last round is without it")
		return
	}
	c := slurmtest.Find(b)
	raw, err := json.Marshal(map[string]any{"url": c.URL, "user": c.User, "token": c.Token(b, c.User), "output_dir": c.OutputDir(b), "partitions": []string{"gpu"},
		"server_id": fmt.Sprintf("bench-%d", os.Getpid())})
	if err != nil {
		b.Fatal(err)
	}
	if code, e := ts.call(ts.admin, "POST", "/api/v1/projects/main/backends", api.AddBackendRequest{Name: "hpc", Type: "slurm", Config: raw}, nil); code != http.StatusOK {
		b.Logf("Slurm is named but not up (%s): the last round is without it", e.Message)
		return
	}
	query(b, "backends=test,aws,kubernetes,slurm")
}
