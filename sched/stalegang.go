package sched

import (
	"strconv"
	"time"
)

// evictStaleGangs stops gangs that have run below their minimum members
// for longer than the grace period: a partial gang holds GPUs without
// making progress.
func (c *cycle) evictStaleGangs() {
	for j := range c.jobs {
		js := &c.jobs[j]
		if js.active == 0 || js.active >= js.minM || js.job.StaleFor < c.policy.StaleGangGrace {
			continue
		}
		reason := "gang runs " + strconv.Itoa(js.active) + " of its " + strconv.Itoa(js.minM) +
			" minimum members for " + formatDuration(js.job.StaleFor) + ", past the " +
			formatDuration(c.policy.StaleGangGrace) + " grace period"
		for _, t := range c.runningTasks(j) {
			c.evict(j, t, StaleGang, reason)
		}
		js.reason = reason
		js.capacityBound = false
	}
}

func formatDuration(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d != 0 && d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.name
		}
	}
	return d.String()
}
