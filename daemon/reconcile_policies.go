package daemon

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// nextTick is the earliest tick after t of any of the cron expressions,
// read in UTC.
func nextTick(exprs []string, t time.Time) (time.Time, error) {
	var next time.Time
	for _, e := range exprs {
		sc, err := cron.ParseStandard("CRON_TZ=UTC " + e)
		if err != nil {
			return time.Time{}, fmt.Errorf("cron %q: %w", e, err)
		}
		if n := sc.Next(t); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	if next.IsZero() {
		return time.Time{}, fmt.Errorf("cron %v never fires", exprs)
	}
	return next.UTC(), nil
}

// wakeAtTick reconciles the run and wakes the scheduler once the clock
// reaches t (a cron tick).
func (s *reconciler) wakeAtTick(id string, t time.Time) {
	key := "tick/" + id + "/" + t.Format(time.RFC3339)
	if !s.working.claim(key) {
		return
	}
	c := s.clock()
	c.AfterFunc(t.Sub(c.Now()), func() {
		s.working.release(key)
		if s.ctx.Err() == nil {
			s.reconcileRun(s.ctx, id)
			kick(s.schedWake)
		}
	})
}

// hasEvent reports whether the run retries on the event.
func (st runState) hasEvent(ev string) bool { return slices.Contains(st.RetryEvents, ev) }

// retryBackoff paces a run's retries after errors and interruptions with
// gpud's one backoff: the first retry waits 1s, each next one twice as
// long, at most 5 minutes (dstack waits 15s to 10m between resubmissions
// of a pending run; a failing job is retried sooner here, then as slowly).
func retryBackoff() api.Backoff { return api.Backoff{First: time.Second, Max: 5 * time.Minute} }

// planRetry applies the run's retry policy to an attempt that ended at
// now with the event ev (error, interruption). ok: the next attempt
// starts at at, after the backoff, and st counts the retry. Not ok with a
// reason: the policy matches but the next attempt would start after the
// retry duration, counted from the first failure of the series; an
// attempt that ran for at least the longest backoff before it failed
// starts a new series, back at the first delay (so a service that fails
// once a day is retried every time, as on dstack).
func planRetry(st *runState, ev string, now time.Time) (at time.Time, ended string, ok bool) {
	if !st.hasEvent(ev) {
		return time.Time{}, "", false
	}
	b := retryBackoff()
	if !st.StartedAt.IsZero() && now.Sub(st.StartedAt) >= b.Max {
		st.FirstFailedAt, st.Retries = time.Time{}, 0
	}
	if st.FirstFailedAt.IsZero() {
		st.FirstFailedAt = now
	}
	delay := b.Delay(st.Retries + 1)
	at = now.Add(delay)
	if end := st.FirstFailedAt.Add(st.RetryFor); st.RetryFor > 0 && at.After(end) {
		return time.Time{}, fmt.Sprintf("not retried: attempt %d would start at %s (after a %s backoff), past the retry duration %s from the first failure at %s",
			st.Attempt+2, at.UTC().Format(time.RFC3339), delay, st.RetryFor, st.FirstFailedAt.UTC().Format(time.RFC3339)), false
	}
	st.Retries++
	st.RetryAt = at
	return at, "", true
}

// retryAt starts the run's next attempt once its backoff has passed: the
// attempt's jobs are created now, held back from the scheduler until at,
// and the run waits pending with a reason naming the attempt, its start
// and what failed (an event records it too).
func (s *reconciler) retryAt(run store.Record, st runState, jobs []store.Record, at, now time.Time, why string) ([]store.Mutation, error) {
	reason := fmt.Sprintf("retrying after %s: attempt %d starts at %s (backoff %s)", why, st.Attempt+2, at.UTC().Format(time.RFC3339), at.Sub(now))
	return s.requeueWith(run, st, jobs, reason, at)
}

// failedReason is a failed run's reason, with why its retry policy did not
// retry it when it matched.
func failedReason(reason, ended string) string {
	if ended == "" {
		return reason
	}
	return reason + "; " + ended
}

// noCapacityDeadline is when a run whose jobs are all still unplaced fails
// with no_capacity: retry on no-capacity with a duration, counted from the
// attempt's submission (or its cron tick). Without that policy a run waits
// pending, as a queued workload does on a KAI-scheduled cluster.
func noCapacityDeadline(st runState, jobs []store.Record, specs []jobRecordSpec) (time.Time, bool) {
	if !st.hasEvent("no-capacity") || st.RetryFor <= 0 || len(jobs) == 0 {
		return time.Time{}, false
	}
	var from time.Time
	for i, j := range jobs {
		if j.Status != store.JobSubmitted || j.Instance != "" {
			return time.Time{}, false
		}
		js := specs[i]
		from = later(from, later(js.SubmittedAt, js.NotBefore))
	}
	return from.Add(st.RetryFor), true
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// failNoCapacity ends an attempt nobody could place within its retry
// duration: its jobs and the run fail with reason no_capacity (a cron run
// waits for its next tick instead).
func (s *reconciler) failNoCapacity(run store.Record, st runState, jobs []store.Record, why string, now time.Time) ([]store.Mutation, error) {
	reason := fmt.Sprintf("no_capacity: still not placed after the retry duration %s (%s)", st.RetryFor, why)
	var muts []store.Mutation
	for _, j := range jobs {
		js, err := jobSpecOf(j)
		if err != nil {
			return nil, err
		}
		js.FinishedAt, js.WhyPending = now, ""
		j.Status, j.Reason, j.Spec = store.JobFailed, reason, encodeSpec(js)
		muts = append(muts, store.Update(j), s.event(j.Project, store.KindJob, j.ID, j.Status, reason))
	}
	if len(st.Cron) > 0 {
		next, err := s.requeueAtTick(run, st, jobs, reason)
		return append(muts, next...), err
	}
	st.FinishedAt = now
	run.Status, run.Reason, run.Spec = store.RunFailed, reason, encodeSpec(st)
	return append(muts, store.Update(run), s.event(run.Project, store.KindRun, run.ID, run.Status, reason)), nil
}

// requeueAtTick resubmits a cron run's jobs for its next tick.
func (s *reconciler) requeueAtTick(run store.Record, st runState, jobs []store.Record, why string) ([]store.Mutation, error) {
	next, err := nextTick(st.Cron, s.clock().Now())
	if err != nil {
		st.FinishedAt = s.now()
		run.Status, run.Reason, run.Spec = store.RunFailed, err.Error(), encodeSpec(st)
		return []store.Mutation{store.Update(run), s.event(run.Project, store.KindRun, run.ID, run.Status, run.Reason)}, nil
	}
	st.FirstFailedAt, st.Retries, st.RetryAt = time.Time{}, 0, time.Time{}
	return s.requeueWith(run, st, jobs, fmt.Sprintf("scheduled: next start at %s (%s)", next.Format(time.RFC3339), why), next)
}

// pollEvery is a watcher's sampling period for a policy window d.
func pollEvery(d time.Duration) time.Duration {
	return min(max(d/4, 100*time.Millisecond), 10*time.Second)
}

// runWatcher calls check every period while the run is running, until
// check returns a stop reason (the run is then stopped) or the run ends.
func (s *reconciler) runWatcher(kind, id string, period time.Duration, check func(run store.Record, jobs []store.Record, now time.Time) string) {
	key := kind + "/" + id
	if !s.working.claim(key) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.working.release(key)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-tick.C:
			}
			run, err := s.store.Runs().Get(id)
			if err != nil || run.Status != store.RunRunning {
				return
			}
			st, err := s.runSpec(run)
			if err != nil {
				return // the run reconciler logs and leaves a corrupt run alone
			}
			var jobs []store.Record
			for _, j := range s.store.Jobs().ByRun(id) {
				js, err := s.jobSpec(j)
				if err != nil {
					return // logged once by jobSpec
				}
				if js.Attempt == st.Attempt && j.Status == store.JobRunning {
					jobs = append(jobs, j)
				}
			}
			reason := check(run, jobs, s.now())
			if reason == "" {
				continue
			}
			muts, err := s.stopMutations(run, false, reason)
			if err != nil {
				s.log.Error().Err(err).Str("run", id).Str("why", reason).Msg("stop run: a record does not decode")
				return
			}
			if _, err := s.store.Apply(s.ctx, muts...); err == nil || s.ctx.Err() != nil {
				return
			}
			// A conflict: the next tick looks again.
		}
	}()
}

// watchUtilization enforces utilization_policy from the agents' per-job
// metrics: the run stops with reason low_gpu_utilization once every GPU of
// one of its jobs read below the minimum in every sample of a whole time
// window. A job whose agent reports no GPU samples is not judged.
func (s *reconciler) watchUtilization(id string, minPct int, window time.Duration) {
	below := map[string]time.Time{} // job -> first sample of its current low streak
	s.runWatcher("util", id, pollEvery(window), func(_ store.Record, jobs []store.Record, now time.Time) string {
		for _, j := range jobs {
			l := s.agents.get(j.Instance)
			if l == nil || l.client == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
			m, err := l.client.Metrics(ctx, j.ID)
			cancel()
			low := err == nil && len(m.GPUs) > 0
			for _, g := range m.GPUs {
				low = low && g.Utilization < minPct
			}
			if !low {
				delete(below, j.ID)
				continue
			}
			if below[j.ID].IsZero() {
				below[j.ID] = now
			}
			if now.Sub(below[j.ID]) >= window {
				return fmt.Sprintf("low_gpu_utilization: every GPU of job %s stayed below %d%% for %s (utilization_policy)", j.Name, minPct, window)
			}
		}
		return ""
	})
}

// watchInactivity enforces a dev environment's inactivity_duration. The
// signal is attachment: an open SSH session into one of its jobs (ssh,
// scp, an IDE; the job's agent reports them, on any host), or, for jobs on
// the server's own host, an established TCP connection to one of the
// job's published ports (gpud attach, a browser), read from
// /proc/net/tcp{,6}. On other hosts, connections to published ports are
// not seen.
func (s *reconciler) watchInactivity(id string, d time.Duration) {
	// idleSince is the first sample that saw no client after one was seen
	// (or the first sample at all). Counting from there, not from the last
	// sample that saw a client, means the run never stops sooner than d after
	// the client really left, whatever the sampling interval.
	var idleSince time.Time
	s.runWatcher("inactivity", id, pollEvery(d), func(_ store.Record, jobs []store.Record, now time.Time) string {
		attached := false
		for _, j := range jobs {
			// An SSH session (ssh, scp, an IDE) counts on any host.
			open, known := s.sshSessionOpen(j)
			if !known {
				return "" // not judged: the agent cannot tell now
			}
			if open {
				attached = true
				continue
			}
			if s.hosts.local == nil || j.Instance != s.hosts.local.instance {
				continue // another host: only its SSH sessions are seen
			}
			var ports []int
			js, err := s.jobSpec(j)
			if err != nil {
				return "" // not judged: its ports are unknown (logged once by jobSpec)
			}
			for _, p := range js.Ports {
				if p.Host != 0 {
					ports = append(ports, p.Host)
				}
			}
			if attachedConnections(ports) > 0 {
				attached = true
			}
		}
		switch {
		case attached:
			idleSince = time.Time{}
		case idleSince.IsZero():
			idleSince = now
		case now.Sub(idleSince) >= d:
			return fmt.Sprintf("inactivity_duration %s: no client attached since %s", d, idleSince.UTC().Format(time.RFC3339))
		}
		return ""
	})
}

// attachedConnections counts the established TCP connections whose local
// port is one of ports, in this host's network namespace.
func attachedConnections(ports []int) int {
	if len(ports) == 0 {
		return 0
	}
	n := 0
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st ...; st 01 is ESTABLISHED.
			fs := strings.Fields(sc.Text())
			if len(fs) < 4 || fs[3] != "01" {
				continue
			}
			_, hexPort, ok := strings.Cut(fs[1], ":")
			if !ok {
				continue
			}
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && slices.Contains(ports, int(p)) {
				n++
			}
		}
		f.Close()
	}
	return n
}
