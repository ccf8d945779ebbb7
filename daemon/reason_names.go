package daemon

import (
	"slices"
	"strings"

	"gpud.dev/gpud/sched"
	"gpud.dev/gpud/store"
)

// The scheduler names jobs by its own names (a task's run id, a service
// replica's job id) and queues by their ids ("project/name"); reasons are
// stored with those names, which stay true when a run is renamed or
// deleted. What the API shows a project's reader names them as the
// project knows them: "job 3f2a…" becomes "run train" (or "job
// svc-1-0" for a service replica), "queue main/team" becomes "queue
// team". Runs and queues of another project are not named to it.

// readableReason rewrites the scheduler's names in text for project.
func (s *Server) readableReason(project, text string) string {
	if !strings.Contains(text, "job ") && !strings.Contains(text, "queue ") {
		return text
	}
	var b strings.Builder
	for {
		i, kind := nextName(text)
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		b.WriteString(text[:i])
		rest := text[i+len(kind)+1:]
		end := strings.IndexAny(rest, " :,;()")
		if end < 0 {
			end = len(rest)
		}
		b.WriteString(s.readableName(project, kind, rest[:end]))
		text = rest[end:]
	}
}

// nextName finds the first "job " or "queue " that starts a word in text:
// its index and the word, or -1.
func nextName(text string) (int, string) {
	best, kind := -1, ""
	for _, w := range []string{"job", "queue"} {
		for from := 0; ; {
			i := strings.Index(text[from:], w+" ")
			if i < 0 {
				break
			}
			i += from
			if i == 0 || text[i-1] == ' ' || text[i-1] == '(' {
				if best < 0 || i < best {
					best, kind = i, w
				}
				break
			}
			from = i + len(w)
		}
	}
	return best, kind
}

// readableName is "run NAME", "job NAME" or "queue NAME" for a scheduler
// name of kind ("job" or "queue") tok, as project may read it.
func (s *Server) readableName(project, kind, tok string) string {
	switch kind {
	case "job":
		if r, err := s.store.Runs().Get(tok); err == nil {
			if r.Project != project {
				return "a run of another project"
			}
			return "run " + r.Name
		}
		if j, err := s.store.Jobs().Get(tok); err == nil {
			if j.Project != project {
				return "a job of another project"
			}
			return "job " + jobName(j)
		}
		if id, _, _ := strings.Cut(tok, "-"); isRecordID(id) {
			return "a run since deleted" // its name is gone with it
		}
	case "queue":
		if p, name, ok := strings.Cut(tok, "/"); ok {
			if p != project {
				return "a queue of another project"
			}
			return "queue " + name
		}
	}
	return kind + " " + tok
}

// takenBackReason is how a run requeued after the scheduler took one of
// its jobs back starts its reason (reconcile.go); the cause follows in
// parentheses.
const takenBackReason = "requeued: a job was taken back by the scheduler ("

// takenBackCause is the eviction that requeued a waiting job ("reclaimed
// by job … of queue …: …"), from its record's reason; "" if none.
func takenBackCause(j store.Record) string {
	rest, ok := strings.CutPrefix(j.Reason, takenBackReason)
	if !ok || j.Status != store.JobSubmitted {
		return ""
	}
	rest = strings.TrimSuffix(rest, ")")
	for _, a := range []sched.Action{sched.Reclaim, sched.Preempt, sched.Consolidate, sched.StaleGang} {
		if r, ok := strings.CutPrefix(rest, string(a)+": "); ok {
			return r
		}
	}
	return rest
}

// whyPendingOf is what the API says a waiting job waits for: the
// scheduler's reason of the last cycle, and, for a job whose run was
// requeued because the scheduler took it back, by whom.
func (s *Server) whyPendingOf(j store.Record, why string) string {
	if cause := takenBackCause(j); cause != "" && why != "" {
		why += "; it was " + cause
	}
	return s.readableReason(j.Project, why)
}

// pipelinedWait records why a job placed on capacity still being freed
// (a pipelined placement) waits until it binds: the node, and the jobs
// stopping there (this plan's victims and jobs already terminating), so
// it does not keep the reason it waited with before the plan.
func (s *scheduler) pipelinedWait(p sched.Placement, idx snapshotIndex, plan *sched.Plan) []store.Mutation {
	recs := idx.jobs[p.Job]
	if p.Task >= len(recs) {
		return nil
	}
	if _, pending := plan.Pending[p.Job]; pending {
		return nil // the pending reasons cover its records
	}
	j := recs[p.Task]
	if j.Status != store.JobSubmitted || j.Instance != "" {
		return nil
	}
	var stopping []string
	for _, e := range plan.Evictions {
		if vs := idx.jobs[e.Job]; e.Node == p.Node && e.Task < len(vs) {
			stopping = append(stopping, "job "+vs[e.Task].ID)
		}
	}
	for _, t := range s.store.Jobs().ByStatus(store.JobTerminating) {
		if t.Instance == p.Node {
			stopping = append(stopping, "job "+t.ID)
		}
	}
	slices.Sort(stopping)
	why := "placed on " + p.Node + " by " + string(p.Action) + "; starts once what it needs there is freed"
	if stopping = slices.Compact(stopping); len(stopping) > 0 {
		why += " (" + strings.Join(stopping, ", ") + " stopping)"
	}
	if cur, err := s.jobSpec(j); err != nil || cur.WhyPending == why {
		return nil
	}
	js, err := jobSpecOf(j)
	if err != nil {
		return nil
	}
	js.WhyPending = why
	j.Spec = encodeSpec(js)
	return []store.Mutation{store.Update(j)}
}

// subjectName is an event subject's name for project: a run's, a job's
// (with its attempt when it is not the first: "train-0-1 (attempt 2)"),
// a queue's.
func (s *Server) subjectName(project, kind, subject string) string {
	switch store.Kind(kind) {
	case store.KindRun:
		if r, err := s.store.Runs().Get(subject); err == nil && r.Project == project {
			return r.Name
		}
	case store.KindJob:
		if j, err := s.store.Jobs().Get(subject); err == nil && j.Project == project {
			return jobName(j)
		}
	case store.KindQueue:
		if name, ok := strings.CutPrefix(subject, project+"/"); ok {
			return name
		}
	}
	return ""
}

// jobStatusOut is a job's status as the API shows it: a job starting on a
// host whose runtime is process pulls no image, so its "pulling" (the
// store's step between bind and running) shows as provisioning.
func (s *Server) jobStatusOut(j store.Record) string {
	if j.Status != store.JobPulling || j.Instance == "" {
		return j.Status
	}
	inst, err := s.store.Instances().Get(j.Instance)
	if err != nil {
		return j.Status
	}
	if st, err := s.instanceSpec(inst); err == nil && st.Host.Runtime == "process" {
		return store.JobProvisioning
	}
	return j.Status
}

// jobName is a job's name with its attempt when it is not the first:
// "train-0-1", "train-0-1 (attempt 2)".
func jobName(j store.Record) string {
	if _, a, ok := strings.Cut(strings.TrimPrefix(j.ID, j.Run), "-a"); ok {
		return j.Name + " (attempt " + a + ")"
	}
	return j.Name
}

// eventReason is an event's reason as the API shows it, with the
// project's names (readableReason): a host's event names the job it
// stopped with its attempt ("stopped job train-0-0 (attempt 1): …").
func (s *Server) eventReason(project, kind, reason string) string {
	return s.readableReason(project, reason)
}

// isRecordID reports whether s has the form of newID's ids (16 hex
// digits).
func isRecordID(s string) bool {
	if len(s) != 16 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
