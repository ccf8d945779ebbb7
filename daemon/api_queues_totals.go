package daemon

import "gpud.dev/gpud/api"

// rollUpQueues makes each parent queue in a listing show its subtree:
// per resource it sets no quota for, the sum of its children's quotas
// (what the scheduler gives it, scheduler_queues.go); without a limit of
// its own, the sum of its children's limits when every child has one
// (nothing below it can hold more); its own decayed usage plus theirs;
// and the pending and running jobs of the whole subtree (jobs are queued
// in leaves). The scheduler's fair share and allocation of a parent are
// already its subtree's.
func rollUpQueues(qs []api.Queue) {
	children := map[string][]int{}
	index := map[string]int{}
	for i, q := range qs {
		index[q.Name] = i
	}
	for i, q := range qs {
		if p, ok := index[q.Parent]; ok && q.Parent != "" && p != i {
			children[q.Parent] = append(children[q.Parent], i)
		}
	}
	done := map[int]bool{}
	var roll func(i, depth int)
	roll = func(i, depth int) {
		if done[i] || depth > 16 {
			return
		}
		done[i] = true
		ch := children[qs[i].Name]
		if len(ch) == 0 {
			return
		}
		for _, c := range ch {
			roll(c, depth+1)
		}
		q := &qs[i]
		var quota, limit, usage api.QueueAmounts
		allLimited := [3]bool{true, true, true}
		for _, c := range ch {
			cq := qs[c]
			quota.GPU, quota.CPU, quota.Memory = quota.GPU+cq.Quota.GPU, quota.CPU+cq.Quota.CPU, quota.Memory+cq.Quota.Memory
			usage.GPU, usage.CPU, usage.Memory = usage.GPU+cq.Usage.GPU, usage.CPU+cq.Usage.CPU, usage.Memory+cq.Usage.Memory
			for r, v := range []float64{cq.Limit.GPU, cq.Limit.CPU, cq.Limit.Memory} {
				allLimited[r] = allLimited[r] && v >= 0
			}
			limit.GPU, limit.CPU, limit.Memory = limit.GPU+max(cq.Limit.GPU, 0), limit.CPU+max(cq.Limit.CPU, 0), limit.Memory+max(cq.Limit.Memory, 0)
			q.Pending += cq.Pending
			q.Running += cq.Running
		}
		own := []*float64{&q.Quota.GPU, &q.Quota.CPU, &q.Quota.Memory}
		sum := []float64{quota.GPU, quota.CPU, quota.Memory}
		ownLimit := []*float64{&q.Limit.GPU, &q.Limit.CPU, &q.Limit.Memory}
		sumLimit := []float64{limit.GPU, limit.CPU, limit.Memory}
		for r := range own {
			if *own[r] == 0 {
				*own[r] = sum[r]
			}
			if *ownLimit[r] < 0 && allLimited[r] {
				*ownLimit[r] = sumLimit[r]
			}
		}
		q.Usage.GPU, q.Usage.CPU, q.Usage.Memory = q.Usage.GPU+usage.GPU, q.Usage.CPU+usage.CPU, q.Usage.Memory+usage.Memory
	}
	for i := range qs {
		roll(i, 0)
	}
}
