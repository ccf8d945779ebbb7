package sched

import (
	"strconv"
	"time"
)

// evictStaleGangs stops gangs that have run below their minimum members
// for at least the grace period: a partial gang holds GPUs without making
// progress. As in KAI Scheduler (actions/stalegangeviction:
// handleStaleJob, PodGroupInfo.IsStale):
//
//   - members that hold capacity count toward the minimum whether they
//     run or are terminating (IsActiveUsedStatus counts releasing ones),
//     so a gang being torn down, or whose members an earlier action of
//     this cycle evicted, is not stale;
//   - a gang is evicted once its time below minimum reaches the grace
//     period, its own (Job.StaleGangGrace, KAI's podgroup
//     stalenessGracePeriod) or else the policy's (a grace of 0 evicts at
//     once); a negative grace period never evicts;
//   - every member that runs is evicted, preemptible or not.
func (c *cycle) evictStaleGangs() {
	for j := range c.jobs {
		js := &c.jobs[j]
		grace := c.policy.StaleGangGrace
		if js.job.StaleGangGrace != nil {
			grace = *js.job.StaleGangGrace
		}
		if grace < 0 {
			continue
		}
		used := c.membersHolding(j)
		if used == 0 || used >= js.minM || js.job.StaleFor < grace {
			continue
		}
		reason := "gang runs " + strconv.Itoa(used) + " of its " + strconv.Itoa(js.minM) +
			" minimum members for " + formatDuration(js.job.StaleFor) + ", past the " +
			formatDuration(grace) + " grace period"
		for t := len(js.tasks) - 1; t >= 0; t-- {
			if js.tasks[t].state == tsRunning {
				c.evict(j, t, StaleGang, reason)
			}
		}
		js.reason = reason
		js.capacityBound = false
	}
}

// membersHolding counts job j's tasks that hold capacity: running, placed
// this cycle, terminating, or evicted this cycle.
func (c *cycle) membersHolding(j int) int {
	n := 0
	for t := range c.jobs[j].tasks {
		switch c.jobs[j].tasks[t].state {
		case tsRunning, tsBound, tsPipelined, tsReleasing, tsEvicted:
			n++
		}
	}
	return n
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
