package agent

import (
	"context"
	"time"
)

// Retention. A finished job's container (docker runtime) or directory
// (process runtime: its output, exit record and what is left of its
// working directory) stays on the host for the job retention after the
// job ended, then the agent removes it, so a host that ran thousands of
// jobs does not keep thousands of exited containers. The job's record,
// its final status, stays for the record retention after that (Get,
// List and Wait still answer with how it ended, for a server that was
// away), then it goes too.
//
// The server copies every job's output into its own store while the job
// runs (daemon/dispatch_logs.go), so the logs a user reads outlive the
// removal; the reaper never removes a job's output while a log stream
// of it is open (the server's copy finishing), and Logs of a removed
// job returns nothing.

// DefaultJobRetention is how long a finished job's container or files
// stay on the host when the agent's Config sets none (`gpud agent
// --job-retention`).
const DefaultJobRetention = time.Hour

// DefaultRecordRetention is how long a removed job's record stays.
const DefaultRecordRetention = 7 * 24 * time.Hour

// reapRetry is how long the reaper waits before it tries a failed
// removal again, or one a log reader held up.
const reapRetry = time.Minute

// reapTimeout bounds one removal (a container the engine takes long to
// delete is tried again later).
const reapTimeout = 2 * time.Minute

func (a *Agent) jobRetention() time.Duration {
	if a.cfg.JobRetention > 0 {
		return a.cfg.JobRetention
	}
	return DefaultJobRetention
}

func (a *Agent) recordRetention() time.Duration {
	if a.cfg.RecordRetention > 0 {
		return a.cfg.RecordRetention
	}
	return DefaultRecordRetention
}

// wakeReaper tells the reaper a job finished (never blocks).
func (a *Agent) wakeReaper() {
	select {
	case a.reapWake <- struct{}{}:
	default:
	}
}

// startReaper runs the reaper until Close: it sleeps until the next job
// is due (or a job finishes), never polling the jobs on a short period.
func (a *Agent) startReaper() {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		for {
			next := a.reap(time.Now())
			timer.Stop()
			var due <-chan time.Time
			if !next.IsZero() {
				timer.Reset(max(time.Until(next), 0))
				due = timer.C
			}
			select {
			case <-a.ctx.Done():
				return
			case <-a.reapWake:
			case <-due:
			}
		}
	}()
}

// reapStep is one thing the reaper does to one job.
type reapStep struct {
	id     string
	j      *job
	record bool // drop the record (its output is gone already)
}

// reap removes the output of jobs past the retention and the records of
// jobs past the record retention, and returns when the next job is due
// (zero: none is).
func (a *Agent) reap(now time.Time) time.Time {
	var next time.Time
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	var steps []reapStep
	a.mu.Lock()
	for id, j := range a.jobs {
		st := j.rec.Status
		if !st.State.Finished() {
			continue
		}
		ended := st.FinishedAt
		if ended.IsZero() {
			ended = st.CreatedAt
		}
		due, record := ended.Add(a.jobRetention()), false
		if !j.rec.Removed.IsZero() {
			due, record = j.rec.Removed.Add(a.recordRetention()), true
		}
		if due.Before(j.reapAfter) {
			due = j.reapAfter
		}
		switch {
		case now.Before(due):
			later(due)
		case !record && j.readers > 0:
			// A log stream of it is open (the server copying the
			// end of its output): come back once it is read.
			j.reapAfter = now.Add(min(reapRetry, a.jobRetention()))
			later(j.reapAfter)
			a.log.Debug().Str("job", id).Int("readers", j.readers).Msg("removal of a finished job waits for its log readers")
		default:
			if !record {
				j.removing = true
			}
			steps = append(steps, reapStep{id: id, j: j, record: record})
		}
	}
	a.mu.Unlock()
	for _, s := range steps {
		if a.ctx.Err() != nil {
			return time.Time{}
		}
		if err := a.reapOne(s, now); err != nil {
			if a.ctx.Err() != nil {
				return time.Time{} // closing: the next agent tries again
			}
			a.log.Warn().Err(err).Str("job", s.id).Dur("retry_in", reapRetry).Msg("remove a finished job's files")
			a.mu.Lock()
			s.j.removing = false
			s.j.reapAfter = now.Add(reapRetry)
			a.mu.Unlock()
			later(s.j.reapAfter)
			continue
		}
		if !s.record {
			later(now.Add(a.recordRetention()))
		}
	}
	return next
}

// reapOne removes one job's output (keeping its record, marked Removed),
// or its record.
func (a *Agent) reapOne(s reapStep, now time.Time) error {
	a.removeMu.Lock()
	defer a.removeMu.Unlock()
	a.mu.Lock()
	cur, ok := a.jobs[s.id]
	rec := s.j.rec
	a.mu.Unlock()
	if !ok || cur != s.j {
		return nil // removed through the API meanwhile
	}
	if s.record {
		if err := a.db.Delete(s.id); err != nil {
			return err
		}
		a.mu.Lock()
		delete(a.jobs, s.id)
		a.mu.Unlock()
		a.log.Debug().Str("job", s.id).Msg("removed the record of a finished job")
		return nil
	}
	if rec.Handle.ID != "" {
		ctx, cancel := context.WithTimeout(a.ctx, reapTimeout)
		err := a.rt.Remove(ctx, rec.Handle)
		cancel()
		if err != nil {
			return err
		}
	}
	a.mu.Lock()
	s.j.rec.Removed = now.UTC()
	s.j.removing = false
	rec = s.j.rec
	a.mu.Unlock()
	if err := a.db.Put(rec); err != nil {
		return err
	}
	a.log.Info().Str("job", s.id).Str("run", rec.Spec.RunName).Str("state", string(rec.Status.State)).
		Dur("retention", a.jobRetention()).Msg("removed a finished job's container or files")
	return nil
}
