package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// StaticGpudEnv names the static gpud binary tests run (uploaded to sshd
// hosts, started as `gpud agent`). Set beforehand, it names a prebuilt one
// (e.g. from `just build-static`) and MainWithStaticGpud builds nothing.
const StaticGpudEnv = "GPUD_TEST_STATIC_BINARY"

// BuildStaticGpud builds gpud.dev/gpud with CGO_ENABLED=0 into dir and
// returns the binary's path; static, so it runs in the minimal sshd image.
func BuildStaticGpud(dir string) (string, error) {
	out := filepath.Join(dir, "gpud")
	cmd := exec.Command("go", "build", "-o", out, "gpud.dev/gpud")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build gpud: %w: %s", err, b)
	}
	return out, nil
}

// MainWithStaticGpud is a TestMain body: it checks the Docker engine
// answers (failing with the fix, never skipping), builds the static gpud
// unless StaticGpudEnv names one, runs the tests and returns the exit code.
func MainWithStaticGpud(m *testing.M) int {
	if err := exec.Command("docker", "info").Run(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: these tests need a reachable Docker engine (CI's .ci/services.sh starts one): %v\n", err)
		return 1
	}
	if os.Getenv(StaticGpudEnv) != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "gpud-static-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := BuildStaticGpud(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	os.Setenv(StaticGpudEnv, bin)
	return m.Run()
}
