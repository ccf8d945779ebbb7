package agent

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/agent/runtime/mixed"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// On the server's own host a runtime without Docker never falls back to
// host processes (issue 11 #0): auto fails each job with the fix, docker
// fails to open, and mixed (an explicit process opt-in) still fails jobs
// that need Docker with the fix. Elsewhere auto and mixed fall back to
// processes, logged.
func TestOpenHostRuntimeWithoutDockerNeverFallsBackOnTheServersHost(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	tests := []struct {
		name    string
		kind    string
		policy  RunPolicy
		want    string // runtime name, "" for an error
		imageOK bool   // whether a job with an image may start (it is not refused with the fix)
		logs    string
	}{
		{"server auto fails jobs with the fix", "", RunPolicy{ServerHost: true, ProcessAsOwnUser: true}, "none", false, "fails every job until Docker runs"},
		{"server docker is an error", RuntimeDocker, RunPolicy{ServerHost: true}, "", false, ""},
		{"server mixed fails image jobs with the fix", RuntimeMixed, RunPolicy{ServerHost: true, ProcessAsOwnUser: true}, mixed.Name, false, "fails every job until Docker runs"},
		{"agent auto falls back to processes", RuntimeAuto, RunPolicy{ProcessAsOwnUser: true}, RuntimeProcess, true, "falling back to the process runtime"},
		{"agent mixed falls back to processes", RuntimeMixed, RunPolicy{ProcessAsOwnUser: true}, RuntimeProcess, true, "falling back to the process runtime"},
		{"embedded mixed falls back to processes", RuntimeMixed, RunPolicy{InvokingUser: true}, RuntimeProcess, true, "falling back to the process runtime"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			rt, info, err := OpenHostRuntime(context.Background(), RuntimeOptions{Kind: tt.kind, DataDir: t.TempDir(), Logger: zerolog.New(&logs)}, tt.policy)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("opened %s, want an error", rt.Name())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			if rt.Name() != tt.want || info.Usable || info.Error == "" || !strings.Contains(logs.String(), tt.logs) {
				t.Fatalf("runtime %s, docker %+v, logs %q; want %s logging %q", rt.Name(), info, logs.String(), tt.want, tt.logs)
			}
			if tt.imageOK {
				return
			}
			_, err = rt.Start(context.Background(), api.JobSpec{ID: "j", Image: "busybox", Commands: []string{"true"}}, nil)
			if err == nil || !strings.Contains(err.Error(), "Docker is not reachable") || !strings.Contains(err.Error(), "--runtime process") {
				t.Fatalf("start: %v, want the fix", err)
			}
		})
	}
}

// A root agent never runs process jobs as root, whichever caller opens it;
// the embedded laptop mode runs them as the invoking user, whoever that is.
func TestOpenHostRuntimeRefusesRootAsTheProcessUserButForTheInvokingUser(t *testing.T) {
	testutil.NeedRoot(t, "only a root agent switches users")
	for _, p := range []RunPolicy{{ProcessUser: "root", ProcessAsOwnUser: true}, {ProcessUser: "root", ServerHost: true}} {
		_, _, err := OpenHostRuntime(context.Background(), RuntimeOptions{Kind: RuntimeProcess, DataDir: t.TempDir(), Logger: zerolog.Nop()}, p)
		var runAs *RunAsError
		if !errors.As(err, &runAs) || !strings.Contains(err.Error(), "unprivileged user") {
			t.Fatalf("policy %+v: %v, want a RunAsError", p, err)
		}
	}
	rt, _, err := OpenHostRuntime(context.Background(), RuntimeOptions{Kind: RuntimeProcess, DataDir: t.TempDir(), Logger: zerolog.Nop()},
		RunPolicy{ProcessUser: "root", InvokingUser: true})
	if err != nil {
		t.Fatalf("invoking user: %v", err)
	}
	rt.Close()
}
