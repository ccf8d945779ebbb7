package sshfleet

import (
	"context"
	"errors"
	"testing"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/internal/testutil"
)

// testHealth is a short detection bound so the fault tests stay fast;
// production uses the defaults (unreachable within 25 s).
const (
	testInterval         = 300 * time.Millisecond
	testUnreachableAfter = 1500 * time.Millisecond
)

func testHealth() HealthConfig {
	return HealthConfig{KeepaliveInterval: testInterval, UnreachableAfter: testUnreachableAfter}
}

// healthEvents runs Monitor on h and returns the channel of its changes.
func healthEvents(t *testing.T, h *Host) <-chan Health {
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan Health, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Monitor(ctx, testHealth(), func(s Health, _ error) { events <- s })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return events
}

// waitHealth waits for want, failing after within.
func waitHealth(t *testing.T, events <-chan Health, want Health, within time.Duration) {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case got := <-events:
			if got == want {
				return
			}
		case <-timer.C:
			t.Fatalf("host not %s within %s", want, within)
		}
	}
}

// TestSilentHostIsMarkedUnreachableWithinTheBound covers both ways a host
// goes silent: its machine dies (container killed) or the network drops
// it (docker network disconnect). Each is declared unreachable within
// UnreachableAfter + KeepaliveInterval, and agent calls then fail fast;
// a partitioned host that comes back is reachable again with its agent
// and the job it was running untouched.
func TestSilentHostIsMarkedUnreachableWithinTheBound(t *testing.T) {
	bound := testUnreachableAfter + testInterval
	tests := []struct {
		name     string
		fail     func(t *testing.T, f *fleet)
		recover  func(t *testing.T, f *fleet)
		comeBack bool
	}{
		{name: "killed host", fail: func(t *testing.T, f *fleet) { f.hosts[0].Kill(t) }},
		{name: "partitioned host reconnects", fail: func(t *testing.T, f *fleet) { f.hosts[0].Disconnect(t) },
			recover: func(t *testing.T, f *fleet) { f.hosts[0].Reconnect(t) }, comeBack: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, 1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			h := f.provision(t, ctx, f.target(0))
			c := agentClient(t, h)
			if _, err := c.Start(ctx, api.JobSpec{ID: "long", RunName: "long", Commands: []string{"sleep 300"}}); err != nil {
				t.Fatalf("start job: %v", err)
			}
			events := healthEvents(t, h)
			start := time.Now()
			tt.fail(t, f)
			// Slack over the bound covers the docker command and scheduling
			// on a shared machine, not detection (measured in the benchmark).
			waitHealth(t, events, Unreachable, bound+2*time.Second)
			t.Logf("unreachable %s after the fault began (bound %s)", time.Since(start), bound)
			if _, err := c.Host(ctx); !errors.Is(err, ErrUnreachable) {
				t.Errorf("agent call while unreachable: %v; want ErrUnreachable", err)
			}
			if !tt.comeBack {
				return
			}
			tt.recover(t, f)
			waitHealth(t, events, Reachable, 15*time.Second)
			testutil.Eventually(t, 5*time.Second, func() error {
				st, err := c.Get(ctx, "long")
				if err != nil {
					return err
				}
				if st.State != api.JobRunning {
					return testutil.Errorf("job %s after the partition, want running", st.State)
				}
				return nil
			})
		})
	}
}
