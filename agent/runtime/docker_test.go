package runtime_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"gpud.dev/gpud/agent/runtime/docker"
	"gpud.dev/gpud/api"
)

// TestDockerAppliesContainerSettings checks the settings only a container
// has (shm size, labels, read-only volumes, CPU quota, init) from inside
// the job and from the engine's own record. Privileged is not exercised:
// the sandbox this project is developed in refuses the capabilities.
func TestDockerAppliesContainerSettings(t *testing.T) {
	tg := targets()[0]
	rt := tg.open(t, t.TempDir(), "settings")
	defer rt.Close()
	vol := t.TempDir()
	if err := os.WriteFile(vol+"/data.txt", []byte("from-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := jobSpec(t, "df -k /dev/shm | busybox tail -1", "cat /data/data.txt", "touch /data/x || echo read-only")
	spec.ShmSize, spec.CPUs = 64*api.MB, 0.5
	spec.Volumes = []api.JobVolume{{HostPath: vol, Path: "/data", ReadOnly: true}}
	spec.Labels = map[string]string{"team": "ml"}
	h := started(t, rt, spec)
	if e := wait(t, rt, h); e.Code != 0 {
		t.Fatalf("exit %+v: %q", e, lines(logs(t, rt, h, allStreams)))
	}
	out := strings.Join(lines(logs(t, rt, h, allStreams)), "\n")
	for _, want := range []string{" 65536 ", "stdout:from-host", "stdout:read-only"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	ins, err := rt.(*docker.Runtime).Client().ContainerInspect(context.Background(), h.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := ins.Container
	if c.HostConfig.NanoCPUs != 5e8 || c.HostConfig.Init == nil || !*c.HostConfig.Init {
		t.Errorf("host config: cpus %d init %v", c.HostConfig.NanoCPUs, c.HostConfig.Init)
	}
	for k, v := range map[string]string{"team": "ml", docker.LabelJob: spec.ID, docker.LabelRun: "test-run", docker.LabelAgent: "settings", docker.LabelManaged: "true"} {
		if c.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Config.Labels[k], v)
		}
	}
	if !slices.Equal(c.Config.Cmd, []string{"/bin/sh", "-c", strings.Join(spec.Commands, " && ")}) {
		t.Errorf("cmd = %q", c.Config.Cmd)
	}
}
