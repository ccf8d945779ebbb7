package slurm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gpud.dev/gpud/api"
)

// Status implements plugins.Backend: one JobStatus per job of the gang,
// from its Slurm job's state, each task's exit code where it wrote one,
// and Slurm's reason while it waits in the queue. A gang the backend
// does not know has none.
func (b *Backend) Status(ctx context.Context, gang string) ([]api.JobStatus, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	j, ok, err := b.findJob(ctx, gang)
	if err != nil {
		return nil, fmt.Errorf("slurm backend: status of gang %s: %w", gang, err)
	}
	if !ok && j.JobID == 0 && len(b.rankJobs(gang)) == 0 {
		return nil, nil // never submitted (or cleaned up)
	}
	_, _, ids, parsed := parseComment(j.Comment)
	if !parsed {
		// Known by id but gone from slurmctld: the task exit codes are
		// what is left; the job ids come from the output directory's.
		ids = b.rankJobs(gang)
		if len(ids) == 0 {
			return nil, nil
		}
	}
	b.mu.Lock()
	stopped := b.stopped[gang]
	b.mu.Unlock()
	out := make([]api.JobStatus, len(ids))
	for rank, id := range ids {
		out[rank] = b.rankStatus(gang, rank, id, j, ok, stopped)
	}
	return out, nil
}

// rankJobs are the gang's job ids from its output directory's jobs file,
// for a Slurm job slurmctld has forgotten.
func (b *Backend) rankJobs(gang string) []string {
	data, err := readGangFile(b.gangDir(gang), "jobs")
	if err != nil {
		return nil
	}
	return strings.Fields(string(data))
}

// exitCode reads the code rank's task wrote when its command ended.
func (b *Backend) exitCode(gang string, rank int) (int, bool) {
	data, err := readGangFile(b.gangDir(gang), "rank-"+strconv.Itoa(rank)+".exit")
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(data)))
	return code, err == nil
}

func unixTime(s int64) time.Time {
	if s <= 0 {
		return time.Time{}
	}
	return time.Unix(s, 0).UTC()
}

// rankStatus maps the gang's Slurm job to rank's job status.
func (b *Backend) rankStatus(gang string, rank int, id string, j slurmJob, known, stopped bool) api.JobStatus {
	st := api.JobStatus{ID: id, Runtime: RuntimeName, Handle: "slurm:" + strconv.Itoa(j.JobID),
		CreatedAt: unixTime(j.SubmitTime), StartedAt: unixTime(j.StartTime)}
	code, wrote := b.exitCode(gang, rank)
	ended := func() {
		st.FinishedAt = unixTime(j.EndTime)
		st.Reason, st.ExitCode = api.ExitExited, code
		st.State = api.JobDone
		if code != 0 {
			st.State = api.JobFailed
		}
	}
	if !known {
		// slurmctld no longer has the job (MinJobAge past its end).
		if wrote {
			ended()
			return st
		}
		st.State, st.Reason, st.ExitCode = api.JobFailed, api.ExitLost, -1
		st.Message = "Slurm no longer knows the gang's job and its task wrote no exit code"
		return st
	}
	state := baseState(j.JobState)
	why := strings.TrimSpace(strings.TrimSuffix(j.StateReason, "None"))
	if j.StateDescription != "" {
		why = strings.TrimSpace(why + ": " + j.StateDescription)
	}
	switch state {
	case "PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING":
		st.State, st.StartedAt = api.JobPulling, time.Time{}
		st.Message = "Slurm job " + strconv.Itoa(j.JobID) + " is " + state
		if why != "" {
			st.Message += " (reason: " + why + ")"
		}
		return st
	case "RUNNING", "COMPLETING":
		st.State = api.JobRunning
		if wrote {
			ended()
		}
		return st
	case "COMPLETED":
		ended()
		return st
	}
	// Ended otherwise: the task's own code where it wrote one, else
	// Slurm's (a wait status).
	if !wrote {
		code = j.ExitCode >> 8 & 0xff
		if sig := j.ExitCode & 0x7f; sig != 0 && code == 0 {
			code = 128 + sig
		}
	}
	st.State, st.ExitCode, st.FinishedAt = api.JobFailed, code, unixTime(j.EndTime)
	st.Reason = api.ExitExited
	if stopped && state != "OUT_OF_MEMORY" {
		// This backend cancelled it (its SIGTERM may have ended the task
		// with a code of its own).
		st.State, st.Reason = api.JobTerminated, api.ExitStopped
		return st
	}
	if wrote && code == 0 && state != "OUT_OF_MEMORY" {
		// This task ended well; another of the gang failed, or Slurm
		// was cancelling what was left of the batch script.
		st.State = api.JobDone
		return st
	}
	switch state {
	case "FAILED":
	case "CANCELLED":
		if !wrote {
			st.Reason, st.Message = api.ExitSignaled, "CANCELLED in Slurm (scancel by someone else, or an administrator)"
		}
	case "TIMEOUT", "DEADLINE":
		if !wrote {
			st.Reason, st.Message = api.ExitSignaled, state+": ran past its Slurm time limit"
		}
	case "OUT_OF_MEMORY":
		st.Reason, st.Message = api.ExitOOMKilled, "OUT_OF_MEMORY in Slurm"
	case "NODE_FAIL", "PREEMPTED", "BOOT_FAIL":
		if !wrote {
			// The work was lost, not wrong: the server's retry treats it
			// as an interruption.
			st.Reason, st.ExitCode, st.Message = api.ExitLost, -1, state+" in Slurm"
			if state == "BOOT_FAIL" {
				st.Reason = api.ExitStartFailed
			}
		}
	default:
		st.Message = "Slurm job state " + j.JobState
	}
	return st
}

var errNoJob = errors.New("no such job in the gang")
