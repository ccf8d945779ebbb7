package sshfleet

import (
	"context"
	"os"
	"testing"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/internal/testutil"
)

// TestMain builds the gpud binary the tests upload: static (CGO_ENABLED=0)
// so it runs in the minimal sshd image. A missing Docker engine fails the
// run with the fix rather than skipping.
func TestMain(m *testing.M) { os.Exit(testutil.MainWithStaticGpud(m)) }

// fleet is a test fleet: sshd containers on their own network, a client
// key they accept and a dialer that pins their keys in memory.
type fleet struct {
	image  string
	net    *testutil.DockerNetwork
	key    testutil.ClientKey
	keys   *MemoryHostKeys
	dialer *Dialer
	hosts  []*testutil.SSHD
}

func newFleet(t testing.TB, n int) *fleet {
	t.Helper()
	f := &fleet{image: testutil.SSHDImage(t), net: testutil.NewDockerNetwork(t), key: testutil.NewClientKey(t, t.TempDir()), keys: &MemoryHostKeys{}}
	f.dialer = &Dialer{Keys: f.keys}
	for range n {
		f.hosts = append(f.hosts, testutil.StartSSHD(t, f.image, f.net, f.key.Public))
	}
	return f
}

func (f *fleet) target(i int) Target {
	h := f.hosts[i]
	return Target{Name: h.Name, Hostname: h.IP, Port: h.Port, User: "root", IdentityFile: f.key.IdentityFile}
}

func (f *fleet) options() Options {
	return Options{Dialer: f.dialer, Binary: os.Getenv(testutil.StaticGpudEnv), AgentArgs: []string{"--runtime", "process", "--fake-gpus", "4xH100:80GB"},
		Logger: zerolog.Nop()}
}

// provision provisions host i and tears it down when the test ends.
func (f *fleet) provision(t testing.TB, ctx context.Context, tg Target) *Host {
	t.Helper()
	h, err := Provision(ctx, tg, f.options())
	if err != nil {
		t.Fatalf("provision %s: %v", tg.Name, err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// agentClient is the server's agent API client for h: through SSH only.
func agentClient(t testing.TB, h *Host) *client.Client {
	t.Helper()
	c, err := client.New(AgentBaseURL, h.Token, h.HTTPClient())
	if err != nil {
		t.Fatal(err)
	}
	return c
}
