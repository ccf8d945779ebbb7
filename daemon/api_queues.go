package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/sched"
	"gpud.dev/gpud/store"
)

// Queues are per project: record id "project/name", and that id is the
// queue's name in the scheduler, so projects never collide. Every project
// has a "default" queue (no quota, weight 1) that runs without `queue:` use.

// queueSpecOf reads a queue record's configuration; the built-in default
// queue has none and gets quota 0, no limit, weight 1. A configuration that
// no longer decodes or parses is a *corruptRecordError, never the default.
func queueSpecOf(r store.Record) (api.QueueSpec, error) {
	q := api.QueueSpec{Name: r.Name, OverQuotaWeight: api.QueueWeights{GPU: 1, CPU: 1, Memory: 1}}
	cs, err := configSpecOf(r)
	if err != nil || len(cs.Config) == 0 {
		return q, err
	}
	cfg, err := api.Parse("", cs.Config)
	if err == nil && cfg.Queue == nil {
		err = fmt.Errorf("the configuration is a %s, not a queue", cfg.Kind)
	}
	if err != nil {
		return q, &corruptRecordError{Kind: r.Kind, ID: r.ID, Part: "spec", Err: err}
	}
	return *cfg.Queue, nil
}

func (s *fleetsAPI) handleApplyQueue(w http.ResponseWriter, r *http.Request) error {
	project, c, cfg, err := s.readApplyConfig(w, r, api.RoleManager)
	if err != nil {
		return err
	}
	if cfg.Queue == nil {
		return badField("configuration.type", "%s is not a queue; apply it with the matching endpoint", cfg.Kind)
	}
	if cfg.Queue.Parent != "" {
		if _, err := s.store.Queues().Get(queueID(project, cfg.Queue.Parent)); err != nil {
			return badField("configuration.parent", "parent queue %q does not exist in project %q; apply it first", cfg.Queue.Parent, project)
		}
	}
	norm, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	rec := store.Record{Kind: store.KindQueue, ID: queueID(project, cfg.Queue.Name), Project: project, Name: cfg.Queue.Name, User: c.name, Spec: encodeSpec(configState{Config: norm})}
	if _, err := s.store.Apply(r.Context(), store.Put(rec), s.event(project, store.KindQueue, rec.ID, "applied", "applied by "+c.name)); err != nil {
		return err
	}
	rec, err = s.store.Queues().Get(rec.ID)
	if err != nil {
		return err
	}
	out, err := s.queueOut(rec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *fleetsAPI) handleListQueues(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	out := []api.Queue{}
	for _, rec := range s.store.Queues().ByProject(project) {
		q, err := s.queueOut(rec)
		if err != nil {
			continue // a corrupt queue is left out of the listing (logged by queueSpec)
		}
		out = append(out, q)
	}
	rollUpQueues(out) // a parent shows its children's totals (api_queues_totals.go)
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *fleetsAPI) handleDeleteQueue(w http.ResponseWriter, r *http.Request) error {
	project, c, err := s.authorize(r, api.RoleManager)
	if err != nil {
		return err
	}
	name := r.PathValue("queue")
	id := queueID(project, name)
	if _, err := s.store.Queues().Get(id); err != nil {
		return notFound("queue", name)
	}
	if name == defaultQueue {
		return conflict("the default queue cannot be deleted")
	}
	for _, run := range s.store.Runs().ByQueue(id) {
		if !finishedRun(run.Status) {
			return conflict("queue %q has active runs (%s); stop them first", name, run.Name)
		}
	}
	for _, q := range s.store.Queues().ByProject(project) {
		qs, err := s.queueSpec(q)
		if err != nil {
			return err // whether it is a child is unknown: refuse rather than orphan it
		}
		if qs.Parent == name {
			return conflict("queue %q is the parent of %q; delete that first", name, q.Name)
		}
	}
	if _, err := s.store.Apply(r.Context(), store.Delete(store.KindQueue, id), s.event(project, store.KindQueue, id, "deleted", "deleted by "+c.name)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// queueOut is the API view of a queue: its configuration, the fair share
// and allocation of the last scheduling cycle, and its decayed usage.
func (s *fleetsAPI) queueOut(rec store.Record) (api.Queue, error) {
	qs, err := s.queueSpec(rec)
	if err != nil {
		return api.Queue{}, err
	}
	cs, err := configSpecOf(rec)
	if err != nil {
		return api.Queue{}, err
	}
	out := api.Queue{Name: rec.Name, Project: rec.Project, Parent: qs.Parent, Priority: qs.Priority, Configuration: cs.Config,
		Quota: api.QueueAmounts{GPU: qs.Quota.GPU, CPU: qs.Quota.CPU, Memory: float64(qs.Quota.Memory)},
		Limit: api.QueueAmounts{GPU: -1, CPU: -1, Memory: -1}}
	if qs.Limit.GPU != nil {
		out.Limit.GPU = *qs.Limit.GPU
	}
	if qs.Limit.CPU != nil {
		out.Limit.CPU = *qs.Limit.CPU
	}
	if qs.Limit.Memory != nil {
		out.Limit.Memory = float64(*qs.Limit.Memory)
	}
	s.scheduler.sharesMu.Lock()
	share, ok := s.scheduler.shares[rec.ID]
	s.scheduler.sharesMu.Unlock()
	if ok {
		out.FairShare = amounts(share.FairShare)
		out.Allocated = amounts(share.Allocated)
	}
	now, window := s.now(), s.scheduler.fairShare().Window
	for _, u := range s.store.Usage().ByQueue(rec.ID) {
		secs, err := s.scheduler.usageOf(u)
		if err != nil || now.Sub(u.CreatedAt) > window {
			continue // a corrupt sample was logged by usageOf
		}
		out.Usage.GPU += secs["gpu"] / 3600
		out.Usage.CPU += secs["cpu"] / 3600
		out.Usage.Memory += secs["memory"] / 3600
	}
	for _, j := range s.store.Jobs().ByQueue(rec.ID) {
		switch {
		case j.Status == store.JobSubmitted:
			out.Pending++
		case activeJob(j.Status):
			out.Running++
		}
	}
	return out, nil
}

func amounts(r sched.Resources) api.QueueAmounts {
	conv := func(v, unit int64) float64 {
		if v < 0 {
			return -1
		}
		return float64(v) / float64(unit)
	}
	return api.QueueAmounts{GPU: conv(r[sched.GPU], 1000), CPU: conv(r[sched.CPU], 1000), Memory: conv(r[sched.Memory], 1)}
}
