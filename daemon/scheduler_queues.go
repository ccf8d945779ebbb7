package daemon

import (
	"sort"

	"gpud.dev/gpud/sched"
)

// schedQueues lists every queue for the scheduler, parents first, and the
// ids of the queues whose record is corrupt: they are left out, and the
// snapshot holds their runs back rather than place them under a quota and
// weight the server cannot read.
func (s *scheduler) schedQueues() ([]sched.Queue, map[string]bool) {
	recs := s.store.Queues().List()
	byID := map[string]sched.Queue{}
	corrupt := map[string]bool{}
	var ids []string
	for _, r := range recs {
		qs, err := s.queueSpec(r)
		if err != nil {
			corrupt[r.ID] = true
			continue
		}
		q := sched.Queue{Name: r.ID, Priority: qs.Priority}
		if qs.Parent != "" {
			q.Parent = queueID(r.Project, qs.Parent)
		}
		q.Quota = sched.Resources{int64(qs.Quota.GPU * 1000), int64(qs.Quota.CPU * 1000), int64(qs.Quota.Memory)}
		// A queue that sets a gpu quota and no cpu or memory quota
		// deserves unlimited cpu and memory (KAI's -1), so its GPU quota
		// is usable by non-preemptible runs, which always request some
		// cpu and memory. `gpud sim` scenarios keep 0 for an omitted quota.
		if q.Quota[sched.GPU] > 0 {
			for _, r := range []sched.Resource{sched.CPU, sched.Memory} {
				if q.Quota[r] == 0 {
					q.Quota[r] = sched.Unlimited
				}
			}
		}
		q.Limit = sched.Resources{sched.Unlimited, sched.Unlimited, sched.Unlimited}
		if qs.Limit.GPU != nil {
			q.Limit[sched.GPU] = int64(*qs.Limit.GPU * 1000)
		}
		if qs.Limit.CPU != nil {
			q.Limit[sched.CPU] = int64(*qs.Limit.CPU * 1000)
		}
		if qs.Limit.Memory != nil {
			q.Limit[sched.Memory] = int64(*qs.Limit.Memory)
		}
		w := qs.OverQuotaWeight
		q.OverQuotaWeight = [sched.NumResources]float64{w.GPU, w.CPU, w.Memory}
		if qs.PreemptMinRuntime != nil && !qs.PreemptMinRuntime.Off {
			d := qs.PreemptMinRuntime.Value
			q.PreemptMinRuntime = &d
		}
		if qs.ReclaimMinRuntime != nil && !qs.ReclaimMinRuntime.Off {
			d := qs.ReclaimMinRuntime.Value
			q.ReclaimMinRuntime = &d
		}
		byID[r.ID] = q
		ids = append(ids, r.ID)
	}
	sort.Strings(ids)
	// A parent deserves, per resource it sets no quota for, the sum of its
	// children's quotas, as in `gpud sim`: else a plain grouping queue
	// would deserve nothing and non-preemptible runs below it never start.
	for _, q := range byID {
		p, ok := byID[q.Parent]
		if q.Parent == "" || !ok {
			continue
		}
		for r := range p.Quota {
			if p.Quota[r] == 0 {
				p.Quota[r] = sched.FromChildren
			}
		}
		byID[q.Parent] = p
	}
	var out []sched.Queue
	done := map[string]bool{}
	var add func(id string, depth int)
	add = func(id string, depth int) {
		q, ok := byID[id]
		if !ok || done[id] || depth > 16 {
			return
		}
		if q.Parent != "" {
			if _, ok := byID[q.Parent]; !ok {
				q.Parent = "" // a missing parent makes the queue top-level
			} else {
				add(q.Parent, depth+1)
			}
		}
		done[id] = true
		out = append(out, q)
	}
	for _, id := range ids {
		add(id, 0)
	}
	return out, corrupt
}
