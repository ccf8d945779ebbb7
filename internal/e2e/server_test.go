package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// busyboxImage is the image the server tests run jobs in; there is no
// registry here, so it is imported from the host's static busybox.
const busyboxImage = "gpud-e2e/busybox:latest"

// importBusybox imports a rootfs holding /bin/busybox and a symlink per
// applet as busyboxImage (docker import, no registry needed).
func importBusybox(t *testing.T) {
	t.Helper()
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("the e2e image needs a static busybox at /bin/busybox (apt-get install busybox-static): %v", err)
	}
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	var rootfs bytes.Buffer
	tw := tar.NewWriter(&rootfs)
	for _, d := range []string{"bin/", "tmp/", "etc/", "proc/", "sys/", "dev/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(bin); err != nil {
		t.Fatal(err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("docker", "import", "--change", "ENV PATH=/bin", "--change", `CMD ["/bin/sh"]`, "-", busyboxImage)
	cmd.Stdin = &rootfs
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker import %s: %v\n%s", busyboxImage, err, out)
	}
}

// writeConfig writes a configuration into dir and returns its path.
func writeConfig(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runs reads `gpud ps -a --json`.
func (s *server) runs(t *testing.T) []api.Run {
	t.Helper()
	r := s.cli.must(timeout(t, time.Minute), "ps", "-a", "--json")
	var runs []api.Run
	if err := json.Unmarshal([]byte(r.stdout), &runs); err != nil {
		t.Fatalf("ps --json is not a list of runs: %v\n%s", err, r.stdout)
	}
	return runs
}

func (s *server) runStatus(t *testing.T, name string) (api.Run, bool) {
	for _, r := range s.runs(t) {
		if r.Name == name {
			return r, true
		}
	}
	return api.Run{}, false
}

func TestServeLoginApplyPsLogsStopWithDocker(t *testing.T) {
	importBusybox(t)
	s := startServer(t, "docker")
	ctx := timeout(t, 3*time.Minute)
	dir := s.cli.home

	queue := writeConfig(t, dir, "queue.yml", "type: queue\nname: research\nquota:\n  cpu: 2\n")
	task := writeConfig(t, dir, "sleeper.yml", fmt.Sprintf(`type: task
name: sleeper
image: %s
queue: research
commands:
  - echo "sleeper started in $DSTACK_RUN_NAME"
  - sleep 300
resources:
  cpu: 1
  memory: 64MB..
  disk: 1GB..
`, busyboxImage))

	if r := s.cli.must(ctx, "apply", queue, task); !strings.Contains(r.stdout, "queue research") || !strings.Contains(r.stdout, "run sleeper") {
		t.Fatalf("apply printed:\n%s", r.stdout)
	}
	testutil.Eventually(t, time.Minute, func() error {
		run, ok := s.runStatus(t, "sleeper")
		if !ok || run.Status != "running" {
			return fmt.Errorf("run sleeper: %+v", run)
		}
		return nil
	})
	testutil.Eventually(t, 30*time.Second, func() error {
		if r := s.cli.run(ctx, "logs", "sleeper"); !strings.Contains(r.stdout, "sleeper started in sleeper") {
			return fmt.Errorf("logs: exit %d %q %q", r.code, r.stdout, r.stderr)
		}
		return nil
	})
	var entry api.LogEntry
	if r := s.cli.must(ctx, "logs", "--json", "sleeper"); json.Unmarshal([]byte(strings.SplitN(r.stdout, "\n", 2)[0]), &entry) != nil ||
		entry.Line != "sleeper started in sleeper" || entry.Stream != api.LogStdout || entry.Job == "" {
		t.Fatalf("logs --json first line = %+v, from:\n%s", entry, r.stdout)
	}

	r := s.cli.must(ctx, "queue", "list", "--json")
	var queues []api.Queue
	if err := json.Unmarshal([]byte(r.stdout), &queues); err != nil {
		t.Fatalf("queue list --json: %v\n%s", err, r.stdout)
	}
	var research *api.Queue
	for i := range queues {
		if queues[i].Name == "research" {
			research = &queues[i]
		}
	}
	if research == nil || research.Quota.CPU != 2 || research.Allocated.CPU != 1 || research.Running != 1 {
		t.Fatalf("queue research = %+v, want quota 2 cpu with 1 cpu allocated to 1 running job", research)
	}
	if r := s.cli.must(ctx, "queue", "list"); !strings.Contains(r.stdout, "FAIR SHARE") || !strings.Contains(r.stdout, "research") {
		t.Fatalf("queue list table:\n%s", r.stdout)
	}

	// logs -f must end by itself once the run is stopped.
	follow := make(chan result, 1)
	go func() { follow <- s.cli.run(ctx, "logs", "-f", "sleeper") }()
	if r := s.cli.must(ctx, "stop", "--abort", "sleeper"); !strings.Contains(r.stdout, "sleeper") {
		t.Fatalf("stop printed %q", r.stdout)
	}
	select {
	case r := <-follow:
		if r.code != 0 || !strings.Contains(r.stdout, "sleeper started") {
			t.Fatalf("logs -f: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
	case <-time.After(time.Minute):
		t.Fatal("logs -f did not end after the run was stopped")
	}
	testutil.Eventually(t, time.Minute, func() error {
		if run, _ := s.runStatus(t, "sleeper"); !run.Finished() {
			return fmt.Errorf("run sleeper still %s", run.Status)
		}
		return nil
	})
	if r := s.cli.must(ctx, "events", "sleeper"); !strings.Contains(r.stdout, "running") || !strings.Contains(r.stdout, "aborted by admin") {
		t.Fatalf("events sleeper must show it ran and why it ended:\n%s", r.stdout)
	}
}

func TestRunAgainstServerExitsWithJobCode(t *testing.T) {
	importBusybox(t)
	s := startServer(t, "docker")
	ctx := timeout(t, 3*time.Minute)
	tests := []struct {
		name     string
		args     func(path string) []string
		command  string
		wantCode int
		want     string
		wantErr  string
	}{
		{name: "-y runs it and streams its output", args: func(p string) []string { return []string{"run", "-y", p} },
			command: "echo out-of-container", want: "out-of-container"},
		{name: "the job's non-zero exit code is returned", args: func(p string) []string { return []string{"run", "-y", p} },
			command: "exit 7", wantCode: 7},
		{name: "without -y and without a terminal it refuses to ask", args: func(p string) []string { return []string{"run", p} },
			command: "echo never", wantCode: 2, wantErr: "pass -y"},
		{name: "-d submits and returns at once", args: func(p string) []string { return []string{"run", "-y", "-d", p} },
			command: "echo detached", wantErr: "gpud logs -f"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, s.cli.home, fmt.Sprintf("run%d.yml", i), fmt.Sprintf(`type: task
name: run%d
image: %s
commands:
  - %q
resources:
  cpu: 1..
  memory: 64MB..
  disk: 1GB..
`, i, busyboxImage, tt.command))
			r := s.cli.run(ctx, tt.args(path)...)
			if r.code != tt.wantCode || !strings.Contains(r.stdout, tt.want) || !strings.Contains(r.stderr, tt.wantErr) {
				t.Fatalf("exit %d (want %d)\nstdout (want %q):\n%s\nstderr (want %q):\n%s", r.code, tt.wantCode, tt.want, r.stdout, tt.wantErr, r.stderr)
			}
		})
	}
	if r := s.cli.run(context.Background(), "secret", "set", "HF_TOKEN", "v1"); r.code != 0 {
		t.Fatalf("secret set: %d %s", r.code, r.stderr)
	}
	if r := s.cli.must(ctx, "secret", "list", "--json"); !strings.Contains(r.stdout, "HF_TOKEN") || strings.Contains(r.stdout, "v1") {
		t.Fatalf("secret list must name HF_TOKEN without its value:\n%s", r.stdout)
	}
	if r := s.cli.must(ctx, "secret", "get", "HF_TOKEN"); strings.TrimSpace(r.stdout) != "v1" {
		t.Fatalf("secret get printed %q, want v1", r.stdout)
	}
}

func TestLoginAndEnvironmentPickTheServer(t *testing.T) {
	s := startServer(t, "process")
	ctx := timeout(t, time.Minute)
	config := filepath.Join(s.cli.home, ".gpud", "config.yml")
	before, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.cli.run(ctx, "login", "--url", s.url, "--token", "wrong", "--name", "other"); r.code != 1 || !strings.Contains(r.stderr, "unauthorized") {
		t.Fatalf("login with a wrong token: exit %d, stderr %q; want exit 1 saying unauthorized", r.code, r.stderr)
	}
	if after, _ := os.ReadFile(config); !bytes.Equal(before, after) {
		t.Fatalf("a failed login changed the config file:\n%s", after)
	}

	fresh := newCLI(t) // no config file at all
	tests := []struct {
		name     string
		env      []string
		wantCode int
		wantOut  string
	}{
		{"GPUD_SERVER and GPUD_TOKEN without a config file", []string{"GPUD_SERVER=" + s.url, "GPUD_TOKEN=" + s.token}, 0, "[]"},
		{"GPUD_SERVER with a wrong token", []string{"GPUD_SERVER=" + s.url, "GPUD_TOKEN=nope"}, 1, ""},
		{"a project the user cannot see", []string{"GPUD_SERVER=" + s.url, "GPUD_TOKEN=" + s.token, "GPUD_PROJECT=nosuch"}, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &cli{t: t, home: fresh.home, env: append(append([]string(nil), fresh.env...), tt.env...)}
			r := c.run(ctx, "ps", "--json")
			if r.code != tt.wantCode || !strings.Contains(r.stdout, tt.wantOut) {
				t.Fatalf("exit %d (want %d), stdout %q (want %q), stderr %q", r.code, tt.wantCode, r.stdout, tt.wantOut, r.stderr)
			}
		})
	}
}
