package dockerimage

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"gpud.dev/gpud/agent/runtime/process"
)

// shimArg marks a test binary started as the process runtime's shim.
const shimArg = "gpud-shim"

// ShimCommand is the process runtime's ShimCommand for tests whose
// TestMain calls Main: the test binary itself acts as the shim.
func ShimCommand() []string { return []string{os.Args[0], shimArg} }

// Main is the TestMain of the agent's test packages: started as a shim it
// runs the shim; otherwise it builds the image once and runs the tests.
// An unreachable Docker engine fails the whole binary with the fix.
func Main(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == shimArg {
		os.Exit(process.RunShim(os.Args[2]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err := buildWithEnv(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the agent tests need a reachable Docker engine (start dockerd; CI's .ci/test does): %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func buildWithEnv(ctx context.Context) error {
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer cli.Close()
	return Build(ctx, cli)
}
