package daemon

import "time"

// Clock is the server's time source: every timestamp it records (events,
// job and run times, usage samples), the cron schedule's ticks and the
// timers that follow them. Implementations must be safe for concurrent use.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed on this clock.
	AfterFunc(d time.Duration, f func())
}

// wallClock is the default Clock.
type wallClock struct{}

func (wallClock) Now() time.Time                      { return time.Now() }
func (wallClock) AfterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }

func (s *Server) clock() Clock {
	if s.opts.Clock != nil {
		return s.opts.Clock
	}
	return wallClock{}
}

// now is the server clock's time in UTC, as records keep it.
func (s *Server) now() time.Time { return s.clock().Now().UTC() }
