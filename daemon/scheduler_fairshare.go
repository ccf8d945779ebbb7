package daemon

import (
	"fmt"
	"math"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/sched"
	"gpud.dev/gpud/store"
)

// Time-based fair share: the scheduler corrects each queue's over-quota
// share by its decayed historical usage (sched.Usage). These are the
// server's settings for it (Options.FairShareWindow, FairShareHalfLife,
// FairShareK; gpud serve --fair-share-*), with KAI Scheduler's own
// defaults beside ours (docs/scheduler.md, "Time-based fair share").
const (
	// DefaultFairShareWindow is how far back usage counts: one week, as
	// KAI's usageParams.windowSize (168h) defaults to.
	DefaultFairShareWindow = 7 * 24 * time.Hour
	// DefaultFairShareHalfLife halves a usage sample's weight per day.
	// KAI's halfLifePeriod defaults to off (no decay); gpud has decayed
	// with a one-day half-life from the start and keeps it.
	DefaultFairShareHalfLife = 24 * time.Hour
	// DefaultFairShareK is the strength of the usage correction, KAI's
	// kValue default (1.0).
	DefaultFairShareK = 1.0
)

// fairShareSettings are the resolved settings (fairShareOptions).
type fairShareSettings struct {
	Window   time.Duration
	HalfLife time.Duration // 0: no decay
	K        float64       // 0: no usage correction
}

// fairShareOptions resolves the Options: zero means the default, a negative
// half-life means no decay and a negative k turns the correction off.
func fairShareOptions(o Options) (fairShareSettings, error) {
	fs := fairShareSettings{Window: o.FairShareWindow, HalfLife: o.FairShareHalfLife, K: o.FairShareK}
	switch {
	case fs.Window < 0:
		return fs, fmt.Errorf("fair-share window %s: must be positive (default %s)", fs.Window, DefaultFairShareWindow)
	case fs.Window == 0:
		fs.Window = DefaultFairShareWindow
	}
	switch {
	case fs.HalfLife < 0:
		fs.HalfLife = 0
	case fs.HalfLife == 0:
		fs.HalfLife = DefaultFairShareHalfLife
	}
	switch {
	case math.IsNaN(fs.K) || math.IsInf(fs.K, 0):
		return fs, fmt.Errorf("fair-share k %v: must be a finite number (default %v)", fs.K, DefaultFairShareK)
	case fs.K < 0:
		fs.K = 0
	case fs.K == 0:
		fs.K = DefaultFairShareK
	}
	return fs, nil
}

// fairShare is the server's resolved fair-share settings (New checked
// them; an unchecked Options falls back to the defaults).
func (s *scheduler) fairShare() fairShareSettings {
	fs, err := fairShareOptions(s.opts)
	if err != nil {
		return fairShareSettings{Window: DefaultFairShareWindow, HalfLife: DefaultFairShareHalfLife, K: DefaultFairShareK}
	}
	return fs
}

// usageOf reads a usage record's resource-seconds ("gpu", "cpu",
// "memory"), decoded once per version; a corrupt one is logged once and
// left out of fair share.
func (s *scheduler) usageOf(u store.Record) (map[string]float64, error) {
	return cachedSpecFor[map[string]float64](s.Server, u)
}

// usageSnapshot is the scheduler's view of the recorded usage at now.
func (s *scheduler) usageSnapshot(now time.Time) sched.Usage {
	fs := s.fairShare()
	u := sched.Usage{Window: fs.Window, HalfLife: fs.HalfLife, K: fs.K, Queues: map[string][]sched.UsageRecord{}}
	for _, r := range s.store.Usage().List() {
		secs, err := s.usageOf(r)
		if err != nil {
			continue
		}
		rec := sched.UsageRecord{Age: now.Sub(r.CreatedAt)}
		rec.Hours[sched.GPU] = secs["gpu"] / 3600
		rec.Hours[sched.CPU] = secs["cpu"] / 3600
		rec.Hours[sched.Memory] = secs["memory"] / 3600 / float64(api.GB)
		u.Queues[r.Queue] = append(u.Queues[r.Queue], rec)
	}
	return u
}
