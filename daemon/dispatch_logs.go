package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	agentclient "gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// followLogs copies a job's output from its agent into the store's logs
// until the job ends, one record per agent entry (a line, a piece of a
// longer one, or a marker for a line the store cannot hold). After a
// broken stream or a server restart it resumes where the kept log ends, so
// entries are neither lost nor doubled.
func (s *dispatcher) followLogs(ctx context.Context, id string, link *agentLink) {
	follow := true
	for ctx.Err() == nil {
		err := s.copyLogs(ctx, id, link, follow)
		if err == nil || agentclient.IsNotFound(err) || !follow {
			if err != nil && !agentclient.IsNotFound(err) && ctx.Err() == nil {
				s.log.Warn().Err(err).Str("job", id).Msg("copy of the job's last output failed")
			}
			return
		}
		if j, gerr := s.store.Jobs().Get(id); gerr != nil || finishedJob(j.Status) {
			// The job ended without its agent's stream ending (its host was
			// lost): one last read without follow picks up what the agent
			// still has, then stop instead of retrying for ever.
			follow = false
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// copyLogs makes one pass of followLogs: it asks the agent for the job's
// entries from where the kept log ends (logResume) and keeps the new ones.
func (s *dispatcher) copyLogs(ctx context.Context, id string, link *agentLink, follow bool) error {
	since, keep, err := s.logResume(id)
	if err != nil {
		return err
	}
	return link.client.Logs(ctx, id, agentclient.LogOptions{Follow: follow, Since: since}, keep)
}

// logResume says how to continue the job's kept log from its agent: ask
// for the entries from since, and pass each to keep, which skips as many
// as the store already holds from that time on (the agent sends the same
// entries in the same order again) and appends the rest.
func (s *dispatcher) logResume(id string) (since time.Time, keep func(api.JobLogEntry) error, err error) {
	since, kept, err := s.logPosition(id)
	if err != nil {
		return time.Time{}, nil, err
	}
	return since, func(e api.JobLogEntry) error {
		if !since.IsZero() && e.Time.Before(since) {
			return nil // an agent that filters more loosely than asked
		}
		if kept > 0 {
			kept--
			return nil
		}
		return s.keepLogEntry(id, e)
	}, nil
}

// keepLogEntry appends one agent entry to the job's stored log. An entry
// larger than the job's log limit is replaced by a marker record saying
// how much was not kept, so it never silently vanishes.
func (s *dispatcher) keepLogEntry(id string, e api.JobLogEntry) error {
	b, err := json.Marshal(storedLine{T: e.Time, S: e.Stream, L: e.Line, P: e.Partial})
	if err != nil {
		return fmt.Errorf("job %s: encode a log line: %w", id, err)
	}
	_, err = s.store.Logs().Append(id, append(b, '\n'))
	if !errors.Is(err, store.ErrLogTooLarge) {
		return err
	}
	marker := storedLine{T: e.Time, S: e.Stream, P: e.Partial, D: int64(len(b)) + 1,
		L: fmt.Sprintf("[gpud: a line of %d bytes is not kept: it is larger than the job's log limit of %d bytes]", len(e.Line), s.store.Logs().Limit())}
	if b, err = json.Marshal(marker); err != nil {
		return fmt.Errorf("job %s: encode a log marker: %w", id, err)
	}
	_, err = s.store.Logs().Append(id, append(b, '\n'))
	return err
}

// logPosition reads the job's kept log and says where a follower resumes:
// the time to ask the agent from (resumeSlack before the last kept entry,
// but not before the oldest kept one, whose predecessors the log limit may
// have dropped) and how many kept entries have that time or later.
func (s *dispatcher) logPosition(id string) (since time.Time, kept int, err error) {
	var times []int64 // UnixNano of every kept entry, in order
	c := newLogCursor(s.store.Logs(), id, 0)
	for {
		rec, ok, err := c.next()
		if err != nil {
			return time.Time{}, 0, err
		}
		if !ok {
			break
		}
		if rec.gap {
			continue
		}
		t, err := recordTime(rec.data)
		if err != nil {
			continue // an unreadable record was not an agent entry
		}
		times = append(times, t.UnixNano())
	}
	if len(times) == 0 {
		return time.Time{}, 0, nil
	}
	from := max(times[len(times)-1]-int64(resumeSlack), times[0])
	for _, t := range times {
		if t >= from {
			kept++
		}
	}
	return time.Unix(0, from).UTC(), kept, nil
}
