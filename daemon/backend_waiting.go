package daemon

import (
	"context"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// noteBackendWaiting records why a job on a job backend still waits
// there (Slurm's pending reason, the Kubernetes scheduler's) as the job's
// reason, which the run's status and `gpud ps` show: "waiting in backend
// hpc: Slurm job 12 is PENDING (reason: Resources)". A job that has not
// started yet keeps the reason "starting on backend NAME" until the
// backend says more.
func (s *dispatcher) noteBackendWaiting(ctx context.Context, backend string, st api.JobStatus) {
	if st.State != api.JobPulling || st.Message == "" {
		return
	}
	reason := "waiting in backend " + backend + ": " + st.Message
	err := s.updateJob(ctx, st.ID, func(j *store.Record, _ *jobRecordSpec) (bool, []store.Mutation) {
		if j.Status != store.JobPulling || j.Reason == reason {
			return false, nil
		}
		j.Reason = reason
		return true, []store.Mutation{s.event(j.Project, store.KindJob, j.ID, j.Status, reason)}
	})
	s.logJobUpdateID(err, st.ID, "record why the job waits on its backend")
}

// backendWaitReason is the reason of the first of jobs that waits in a
// backend's queue, which becomes the provisioning run's reason.
func backendWaitReason(jobs []store.Record) string {
	for _, j := range jobs {
		if j.Status == store.JobPulling && strings.HasPrefix(j.Reason, "waiting in backend ") {
			return j.Reason
		}
	}
	return ""
}
