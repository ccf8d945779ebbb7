package server_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/agent"
	"gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/agent/runtime/mixed"
	"gpud.dev/gpud/agent/server"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil/dockerimage"
)

// openHost opens cfg and serves it on a unix socket until the test ends;
// the client speaks to it with the host's token.
func openHost(t *testing.T, cfg server.HostConfig) (*server.Host, *client.Client) {
	t.Helper()
	h, err := server.OpenHost(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := errors.Join(<-served, h.Close()); err != nil {
			t.Error(err)
		}
	})
	c, err := client.New("unix://"+sock, h.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	removeAll(t, c)
	return h, c
}

// `gpud agent --runtime mixed` (issue 12): one agent runs a job with an
// image as a container and an image-less job as a process, as the embedded
// laptop mode's local agent does, through the same assembly.
func TestOpenHostMixedRunsImageJobsInDockerAndImagelessOnesAsProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "agent")
	h, c := openHost(t, server.HostConfig{DataDir: dir, AgentID: "mixed-" + strings.ReplaceAll(t.Name(), "/", "-"), Runtime: agent.RuntimeMixed,
		Policy: agent.RunPolicy{InvokingUser: true}, ShimCommand: dockerimage.ShimCommand(), FakeGPUs: "1xH100:80GB", Logger: zerolog.Nop()})
	if h.RuntimeName() != mixed.Name {
		t.Fatalf("runtime %q, want %q", h.RuntimeName(), mixed.Name)
	}
	ctx := context.Background()
	withImage := api.JobSpec{ID: "with-image", Image: dockerimage.Ref, Commands: []string{"echo in-a-container"}, StopDuration: 2 * time.Second}
	imageless := api.JobSpec{ID: "imageless", Commands: []string{"echo as-a-process"}, StopDuration: 2 * time.Second}
	for _, spec := range []api.JobSpec{withImage, imageless} {
		if _, err := c.Start(ctx, spec); err != nil {
			t.Fatalf("start %s: %v", spec.ID, err)
		}
		st, err := c.Wait(ctx, spec.ID)
		if err != nil || st.State != api.JobDone {
			t.Fatalf("%s: %+v %v", spec.ID, st, err)
		}
		// The process runtime's handles are "<pid>:<ticks>", containers'
		// are ids without a colon.
		if asProcess := strings.Contains(st.Handle, ":"); asProcess != (spec.Image == "") {
			t.Errorf("%s ran with handle %q: image %q in the wrong runtime", spec.ID, st.Handle, spec.Image)
		}
	}
}

// Both callers' data dirs end up 0700 whatever mode they had (a process
// job running as another user cannot enter them), and a token the caller
// passes (the server's local agent's, fresh each start) is never written
// to disk, while an agent without one keeps its own in DATA_DIR/token.
func TestOpenHostMakesTheDataDirPrivateAndWritesOnlyItsOwnToken(t *testing.T) {
	for _, given := range []string{"given-token", ""} {
		dir := filepath.Join(t.TempDir(), "agent")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		h, c := openHost(t, server.HostConfig{DataDir: dir, AgentID: "tok", Runtime: agent.RuntimeProcess, Token: given,
			Policy: agent.RunPolicy{InvokingUser: true}, ShimCommand: dockerimage.ShimCommand(), Logger: zerolog.Nop()})
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("data dir %v %v, want mode 0700", fi, err)
		}
		if _, err := c.List(context.Background()); err != nil {
			t.Fatalf("the API refuses its own token: %v", err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "token"))
		switch {
		case given != "" && (h.Token != given || !errors.Is(err, os.ErrNotExist)):
			t.Fatalf("token %q, token file %q %v; want the given token and no file", h.Token, b, err)
		case given == "" && (err != nil || strings.TrimSpace(string(b)) != h.Token):
			t.Fatalf("token %q, token file %q %v; want the file's token", h.Token, b, err)
		}
	}
}
