package cli

import (
	"context"
	"fmt"
	"time"

	"gpud.dev/gpud/api"
)

// followAttempts streams the run's output attempt after attempt: when an
// attempt's jobs have ended and the run's retry policy started another
// one, it says so on stderr (the run's reason names the attempt, when it
// starts and what failed) and goes on with that attempt's output. It
// returns once the run finished, or once its output ended and no new
// attempt came within finishWait (finish then reports the status).
func (s *runSession) followAttempts(ctx context.Context, name string, each func(api.LogEntry) error) error {
	run, err := s.client.GetRun(ctx, s.project, name)
	if err != nil {
		return err
	}
	attempt := run.Attempt + 1 // the API counts retries; attempts count from 1
	for {
		if err := s.client.RunLogs(ctx, s.project, name, api.LogOptions{Follow: true, Attempt: attempt}, each); err != nil {
			return err
		}
		deadline := time.Now().Add(finishWait)
		for {
			if run, err = s.client.GetRun(ctx, s.project, name); err != nil {
				return err
			}
			if run.Finished() || run.Attempt+1 > attempt || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(statusPoll):
			}
		}
		if run.Finished() || run.Attempt+1 <= attempt {
			return nil
		}
		attempt = run.Attempt + 1
		fmt.Fprintf(s.errw, "gpud: run %s, attempt %d: %s\n", name, attempt, orDash(run.Reason))
	}
}
