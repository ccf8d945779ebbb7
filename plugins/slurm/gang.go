package slurm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"gpud.dev/gpud/plugins"
)

// slurmJob is a job as slurmrestd reports it (the fields used).
type slurmJob struct {
	JobID            int    `json:"job_id"`
	Name             string `json:"name"`
	Comment          string `json:"comment"`
	JobState         string `json:"job_state"`
	StateReason      string `json:"state_reason"`
	StateDescription string `json:"state_description"`
	ExitCode         int    `json:"exit_code"` // a wait status: code<<8 | signal
	UserName         string `json:"user_name"`
	SubmitTime       int64  `json:"submit_time"`
	StartTime        int64  `json:"start_time"`
	EndTime          int64  `json:"end_time"`
	Nodes            string `json:"nodes"`
}

type jobsAnswer struct {
	answer
	Jobs []slurmJob `json:"jobs"`
}

// StartGang implements plugins.Backend: one batch job for the gang
// (--nodes=N, a task per node), submitted unless the cluster already has
// the gang's job (a repeated call is a no-op).
func (b *Backend) StartGang(ctx context.Context, g plugins.Gang) error {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	if _, ok, err := b.findJob(ctx, g.ID); err != nil {
		return fmt.Errorf("slurm backend: start gang %s: %w", g.ID, err)
	} else if ok {
		return nil
	}
	parts, err := b.usedPartitions(ctx)
	if err != nil {
		return fmt.Errorf("slurm backend: start gang %s: %w", g.ID, err)
	}
	desc, script, err := b.submission(g, parts)
	if err != nil {
		return err
	}
	var a struct {
		answer
		JobID int `json:"job_id"`
	}
	if err := b.c.do(ctx, http.MethodPost, b.c.path("job/submit"), map[string]any{"script": script, "job": desc}, &a); err != nil {
		return fmt.Errorf("slurm backend: submit gang %s: %w", g.ID, err)
	}
	b.mu.Lock()
	b.ids[g.ID] = a.JobID
	b.mu.Unlock()
	b.log.Info().Str("gang", g.ID).Int("slurm_job", a.JobID).Int("nodes", len(g.Jobs)).Msg("submitted")
	return nil
}

// listJobs lists the cluster's jobs that this server's backend submitted.
func (b *Backend) listJobs(ctx context.Context) ([]slurmJob, error) {
	var a jobsAnswer
	if err := b.c.do(ctx, http.MethodGet, b.c.path("jobs"), nil, &a); err != nil {
		return nil, err
	}
	var out []slurmJob
	for _, j := range a.Jobs {
		if server, _, _, ok := parseComment(j.Comment); ok && server == b.cfg.ServerID {
			out = append(out, j)
		}
	}
	return out, nil
}

// findJob finds gang's Slurm job: by the id it was submitted as, else
// by the comments of the cluster's jobs (after a plugin restart). The
// newest wins if the gang was submitted twice.
func (b *Backend) findJob(ctx context.Context, gang string) (slurmJob, bool, error) {
	b.mu.Lock()
	id, known := b.ids[gang]
	b.mu.Unlock()
	if known {
		j, err := b.getJob(ctx, id)
		if err == nil {
			return j, true, nil
		}
		if !errorNumber(err, errInvalidJobID) {
			return slurmJob{}, false, err
		}
		// Gone from slurmctld (MinJobAge past its end).
		return slurmJob{JobID: id}, false, nil
	}
	jobs, err := b.listJobs(ctx)
	if err != nil {
		return slurmJob{}, false, err
	}
	var found slurmJob
	ok := false
	for _, j := range jobs {
		if _, g, _, _ := parseComment(j.Comment); g == gang && (!ok || j.JobID > found.JobID) {
			found, ok = j, true
		}
	}
	if ok {
		b.mu.Lock()
		b.ids[gang] = found.JobID
		b.mu.Unlock()
	}
	return found, ok, nil
}

func (b *Backend) getJob(ctx context.Context, id int) (slurmJob, error) {
	var a jobsAnswer
	if err := b.c.do(ctx, http.MethodGet, b.c.path("job/"+strconv.Itoa(id)), nil, &a); err != nil {
		return slurmJob{}, err
	}
	if len(a.Jobs) == 0 {
		return slurmJob{}, &apiError{Method: http.MethodGet, Path: b.c.path("job/" + strconv.Itoa(id)), Status: http.StatusOK,
			Errors: []slurmError{{ErrorNumber: errInvalidJobID, Description: "no such job"}}}
	}
	return a.Jobs[0], nil
}

// List implements plugins.Backend: the gangs of this server's jobs that
// Slurm still runs or queues, and the finished ones whose output is
// still there (Stop has not cleaned them up).
func (b *Backend) List(ctx context.Context) ([]string, error) {
	ctx, cancel := b.callCtx(ctx)
	defer cancel()
	jobs, err := b.listJobs(ctx)
	if err != nil {
		return nil, fmt.Errorf("slurm backend: list: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, j := range jobs {
		_, g, _, _ := parseComment(j.Comment)
		if seen[g] {
			continue
		}
		if _, err := os.Stat(b.gangDir(g)); finishedState(j.JobState) && err != nil {
			continue
		}
		seen[g] = true
		out = append(out, g)
	}
	return out, nil
}

func (b *Backend) gangDir(gang string) string { return b.cfg.OutputDir + "/" + gangName(gang) }

// Stop implements plugins.Backend with scancel's semantics: a running
// gang gets SIGTERM (to its steps and batch script), and, when it has
// not ended within grace, is cancelled (SIGKILL after the cluster's
// KillWait); a pending one is cancelled at once. A gang already finished
// is cleaned up: its output directory is removed (the server has copied
// the logs by then).
func (b *Backend) Stop(ctx context.Context, gang string, grace time.Duration) error {
	j, ok, err := b.findJob(ctx, gang)
	if err != nil {
		return fmt.Errorf("slurm backend: stop gang %s: %w", gang, err)
	}
	if !ok || finishedState(j.JobState) {
		b.cleanUp(gang)
		return nil
	}
	if b.tasksEnded(gang, j) {
		// Every task wrote its exit code: Slurm is only completing the
		// batch script. Cancel what is left of it and clean up now (no
		// second Stop comes for a gang whose jobs have all finished).
		if err := b.cancel(ctx, j.JobID, ""); err != nil {
			return fmt.Errorf("slurm backend: stop gang %s (job %d): %w", gang, j.JobID, err)
		}
		b.cleanUp(gang)
		return nil
	}
	b.mu.Lock()
	b.stopped[gang] = true
	b.mu.Unlock()
	if baseState(j.JobState) == "RUNNING" && grace > 0 {
		if err := b.cancel(ctx, j.JobID, "TERM"); err != nil {
			return fmt.Errorf("slurm backend: stop gang %s (job %d): %w", gang, j.JobID, err)
		}
		deadline := time.Now().Add(grace)
		for time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
			cur, err := b.getJob(ctx, j.JobID)
			if err != nil || finishedState(cur.JobState) {
				return nil
			}
		}
	}
	if err := b.cancel(ctx, j.JobID, ""); err != nil {
		return fmt.Errorf("slurm backend: stop gang %s (job %d): %w", gang, j.JobID, err)
	}
	return nil
}

// cancel is DELETE /job/ID (scancel), with a signal: only that signal.
func (b *Backend) cancel(ctx context.Context, id int, signal string) error {
	cctx, cancel := b.callCtx(ctx)
	defer cancel()
	p := b.c.path("job/" + strconv.Itoa(id))
	if signal != "" {
		p += "?signal=" + signal
	}
	err := b.c.do(cctx, http.MethodDelete, p, nil, nil)
	if errorNumber(err, errAlreadyDone) || errorNumber(err, errInvalidJobID) {
		return nil
	}
	return err
}

// cleanUp removes a finished gang's output (best effort: the files are
// the job user's, in a directory the server may not own).
func (b *Backend) cleanUp(gang string) {
	dir := b.gangDir(gang)
	for _, p := range []string{dir, dir + ".out"} {
		if err := os.RemoveAll(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.log.Warn().Err(err).Str("gang", gang).Msg("remove the gang's output")
		}
	}
}

// baseState is a job state without its flags ("COMPLETING" stays).
func baseState(s string) string {
	s, _, _ = strings.Cut(strings.ToUpper(s), "+")
	return strings.TrimSpace(s)
}

// finishedState: Slurm will not run the job any more.
func finishedState(s string) bool {
	switch baseState(s) {
	case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE":
		return true
	}
	return false
}

// tasksEnded reports whether every task of gang's job j wrote its exit
// code.
func (b *Backend) tasksEnded(gang string, j slurmJob) bool {
	_, _, ids, ok := parseComment(j.Comment)
	if !ok || len(ids) == 0 {
		return false
	}
	for rank := range ids {
		if _, wrote := b.exitCode(gang, rank); !wrote {
			return false
		}
	}
	return true
}
