package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"gpud.dev/gpud/api"
)

// A privileged container is root on its host: every agent refuses jobs
// with privileged: true, with the fix, unless its admin allowed them
// (gpud agent --allow-privileged, or the embedded mode's invoking user on
// their own machine). The process runtime refuses them whatever the
// policy, as a process cannot be privileged.
func TestAgentsRefusePrivilegedJobsUnlessTheirAdminAllowsThem(t *testing.T) {
	spec := api.JobSpec{ID: "priv", Commands: []string{"true"}, Privileged: true}
	tests := []struct {
		name   string
		policy RunPolicy
		want   string
	}{
		{"agent without --allow-privileged", RunPolicy{ProcessAsOwnUser: true}, "gpud agent --allow-privileged"},
		{"agent with --allow-privileged", RunPolicy{ProcessAsOwnUser: true, AllowPrivileged: true}, "cannot be honoured by the process runtime"},
		{"embedded", RunPolicy{InvokingUser: true}, "cannot be honoured by the process runtime"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, _, err := OpenHostRuntime(context.Background(), RuntimeOptions{Kind: RuntimeProcess, DataDir: t.TempDir(), Logger: zerolog.Nop()}, tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			if _, err := rt.Start(context.Background(), spec, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("start: %v, want an error naming %q", err, tt.want)
			}
			if got, want := tt.policy.PrivilegedAllowed(), tt.want != "gpud agent --allow-privileged"; got != want {
				t.Fatalf("PrivilegedAllowed = %v, want %v", got, want)
			}
		})
	}
}
