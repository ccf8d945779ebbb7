package daemon

// lifecycleRules are the fields that say how long a run lives and what
// happens when it fails: retries, durations, the stop grace period.
var lifecycleRules = fieldRules{
	// Retries after errors and interruptions wait an exponential backoff
	// (1s doubling to 5m) within the duration; each attempt's logs stay
	// reachable (gpud logs --attempt N); no-capacity fails an unplaced run
	// after the duration.
	"retry": {Subtree: true, Proof: []string{
		"daemon.TestRetryBacksOffExponentiallyWithinItsDuration", "daemon.TestLogsOfEachAttemptStayReachable",
		"cli.TestLogsAttemptPrintsThatAttemptsOutput", "daemon.TestRetryOnNoCapacity", "daemon.TestRetryOnInterruption"}},
	"max_duration": {Proof: []string{"daemon.TestMaxDurationStopsTheRunWithItsReason"}},
	"stop_duration": {Proof: []string{"daemon.TestStopDurationIsTheGraceBetweenSIGTERMAndSIGKILL"},
		Check: func(fc *fieldCheck, _ string) *refusal {
			if d := fc.run.StopDuration; d != nil && d.Off {
				return &refusal{
					Why:     "`off` asks for an unbounded grace, and a stop (gpud stop --abort too) ends a job that ignores SIGTERM only with the SIGKILL after the grace, so such a job could never be stopped",
					Instead: "set a duration, e.g. stop_duration: 1h",
				}
			}
			return nil
		}},
}
