package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gpud.dev/gpud/api"
)

// maxLine is where a long line is cut into Partial pieces.
const maxLine = 64 << 10

// jobRank finds the gang and node rank of job: from the comments of the
// jobs slurmctld knows, else from the output directories' jobs files.
func (b *Backend) jobRank(ctx context.Context, job string) (gang string, rank int, err error) {
	jobs, err := b.listJobs(ctx)
	if err != nil {
		return "", 0, err
	}
	for _, j := range jobs {
		_, g, ids, _ := parseComment(j.Comment)
		if i := slices.Index(ids, job); i >= 0 {
			return g, i, nil
		}
	}
	files, err := filepath.Glob(filepath.Join(b.cfg.OutputDir, "gpud-*", "jobs"))
	if err != nil {
		return "", 0, err
	}
	for _, f := range files {
		data, err := readGangFile(filepath.Dir(f), "jobs")
		if err != nil {
			continue
		}
		if i := slices.Index(strings.Fields(string(data)), job); i >= 0 {
			// The directory is named after the gang; the batch script's
			// environment names it too, but slurmctld has forgotten it:
			// the directory name stands for the gang here.
			return "dir:" + filepath.Base(filepath.Dir(f)), i, nil
		}
	}
	return "", 0, fmt.Errorf("%w: %s", errNoJob, job)
}

// Logs implements plugins.Backend from the task's output file
// (stdout and stderr merged, as srun writes them: every entry says
// stdout). The file has no times: each line's time is the task's start
// (when the batch script began) plus its byte offset in nanoseconds, the
// same on every read, so a copy resumes exactly where it stopped. With
// follow it waits for a pending job's file and reads on until the task
// ends or ctx does.
func (b *Backend) Logs(ctx context.Context, job string, follow bool, emit func(api.JobLogEntry) error) error {
	lctx, cancel := b.callCtx(ctx)
	gang, rank, err := b.jobRank(lctx, job)
	cancel()
	if err != nil {
		return fmt.Errorf("slurm backend: logs of job %s: %w", job, err)
	}
	dir := b.gangDir(gang)
	if d, ok := strings.CutPrefix(gang, "dir:"); ok {
		dir = filepath.Join(b.cfg.OutputDir, d)
	}
	out := "rank-" + strconv.Itoa(rank) + ".out"
	ended := func() bool {
		if _, err := readGangFile(dir, "rank-"+strconv.Itoa(rank)+".exit"); err == nil {
			return true
		}
		if strings.HasPrefix(gang, "dir:") {
			return true
		}
		sctx, cancel := b.callCtx(ctx)
		defer cancel()
		j, ok, err := b.findJob(sctx, gang)
		return err == nil && (!ok || finishedState(j.JobState))
	}
	var f *os.File
	for {
		f, err = openGangFile(dir, out)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("slurm backend: logs of job %s: %w", job, err)
		}
		if !follow || ended() {
			return nil // never started, or no output yet
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
	defer f.Close()
	base := startTime(dir)
	var off int64 // of pending's first byte
	var pending []byte
	buf := make([]byte, 64<<10)
	for {
		n, rerr := f.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			i := bytes.IndexByte(pending, '\n')
			if i < 0 {
				break
			}
			if err := emitLine(base, off, string(pending[:i]), emit); err != nil {
				return err
			}
			off += int64(i) + 1
			pending = pending[i+1:]
		}
		if len(pending) > maxLine {
			if err := emit(api.JobLogEntry{Time: base.Add(time.Duration(off)), Stream: api.LogStdout, Line: string(pending[:maxLine]), Partial: true}); err != nil {
				return err
			}
			off += maxLine
			pending = pending[maxLine:]
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return fmt.Errorf("slurm backend: logs of job %s: %w", job, rerr)
		}
		if n > 0 {
			continue
		}
		// At the end of the file for now.
		if !follow || ended() {
			// Read what the task wrote before it ended, then stop.
			rest, err := io.ReadAll(f)
			if err != nil {
				return fmt.Errorf("slurm backend: logs of job %s: %w", job, err)
			}
			pending = append(pending, rest...)
			for _, line := range strings.SplitAfter(string(pending), "\n") {
				if line == "" {
					continue
				}
				if err := emitLine(base, off, strings.TrimSuffix(line, "\n"), emit); err != nil {
					return err
				}
				off += int64(len(line))
			}
			return nil
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// emitLine emits one line whose first byte is at off, cut into Partial
// pieces where it is long.
func emitLine(base time.Time, off int64, line string, emit func(api.JobLogEntry) error) error {
	for len(line) > maxLine {
		if err := emit(api.JobLogEntry{Time: base.Add(time.Duration(off)), Stream: api.LogStdout, Line: line[:maxLine], Partial: true}); err != nil {
			return err
		}
		off += maxLine
		line = line[maxLine:]
	}
	return emit(api.JobLogEntry{Time: base.Add(time.Duration(off)), Stream: api.LogStdout, Line: line})
}

// startTime is when the gang's batch script began (its "started" file),
// the base of its lines' times.
func startTime(dir string) time.Time {
	data, err := readGangFile(dir, "started")
	if err == nil {
		if s, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil {
			return time.Unix(s, 0).UTC()
		}
	}
	if st, err := os.Lstat(dir); err == nil {
		return st.ModTime().UTC().Truncate(time.Second)
	}
	return time.Unix(0, 0).UTC()
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
