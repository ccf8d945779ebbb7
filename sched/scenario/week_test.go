package scenario

import (
	"fmt"
	"math"
	"testing"
	"time"

	"gpud.dev/gpud/sched"
)

// weekResult is one simulated week: per queue the GPU-hours its fair
// share added up to and those its jobs really held.
type weekResult struct {
	fair, realized         map[string]float64
	fairSecond, realSecond map[string]float64 // the second half only
	// reference is the GPU-hours of KAI's formula computed here without
	// rounding (the design's P = max(0, w + k(w - u)) on the same usage).
	reference map[string]float64
	evictions float64
}

// deviation is the largest relative gap between realized GPU-hours and
// the given per-queue figures.
func (r weekResult) deviation(want map[string]float64) float64 {
	var worst float64
	for q, w := range want {
		if w > 0 {
			worst = math.Max(worst, math.Abs(r.realized[q]-w)/w)
		}
	}
	return worst
}

// simulateWeek runs the scheduler every cycle for a week on 16 GPUs and
// four queues of equal quota (2 GPUs each, over-quota weight 1); a, b and c
// always have more 1-GPU jobs (2h each) than fit, d submits only from the
// middle of the week. Between cycles the cluster does what Run does
// (advance); each cycle's usage is recorded as KAI's usage database
// would sample it, with the cluster's capacity beside it.
func simulateWeek(k float64, halfLife time.Duration) weekResult {
	const (
		step     = 10 * time.Minute
		week     = 7 * 24 * time.Hour
		jobLen   = 2 * time.Hour
		backlog  = 20
		gpusNode = 8
	)
	queues := []string{"a", "b", "c", "d"}
	snap := &sched.Snapshot{
		Policy: sched.Policy{StaleGangGrace: time.Minute},
		Usage:  sched.Usage{Window: week, HalfLife: halfLife, K: k, Queues: map[string][]sched.UsageRecord{}},
	}
	for n := 0; n < 2; n++ {
		node := sched.Node{Name: fmt.Sprintf("n%d", n), CPU: 64000, Memory: 512 << 30}
		for d := 0; d < gpusNode; d++ {
			node.Devices = append(node.Devices, sched.Device{Index: d, Name: "H100"})
		}
		snap.Nodes = append(snap.Nodes, node)
	}
	for _, q := range queues {
		snap.Queues = append(snap.Queues, sched.Queue{
			Name: q, Priority: 100, Quota: sched.Resources{2 * sched.OneGPU, 0, 0},
			Limit: sched.Resources{sched.Unlimited, sched.Unlimited, sched.Unlimited}, OverQuotaWeight: [3]float64{1, 1, 1},
		})
	}
	s := &Scenario{CycleLength: step}
	res := weekResult{fair: map[string]float64{}, realized: map[string]float64{},
		fairSecond: map[string]float64{}, realSecond: map[string]float64{}, reference: map[string]float64{}}
	type sample struct {
		at    time.Duration
		hours [sched.NumResources]float64
	}
	history := map[string][]sample{}
	var capacity []sample
	submitted := 0
	hours := step.Hours()
	for now := time.Duration(0); now < week; now += step {
		second := now >= week/2
		// Keep a backlog of pending jobs in every active queue.
		for _, q := range queues {
			if q == "d" && !second {
				continue
			}
			pending := 0
			for _, j := range snap.Jobs {
				if j.Queue == q && j.Tasks[0].Status == sched.Pending {
					pending++
				}
			}
			for ; pending < backlog; pending++ {
				submitted++
				snap.Jobs = append(snap.Jobs, sched.Job{Name: fmt.Sprintf("%s-%05d", q, submitted), Queue: q,
					Priority: 50, Preemptible: true, Tasks: []sched.Task{{GPU: sched.OneGPU}}})
			}
		}
		// The usage database as this cycle sees it: every sample so far.
		for _, q := range queues {
			recs := snap.Usage.Queues[q][:0]
			for _, h := range history[q] {
				recs = append(recs, sched.UsageRecord{Age: now - h.at, Hours: h.hours})
			}
			snap.Usage.Queues[q] = recs
		}
		snap.Usage.Capacity = snap.Usage.Capacity[:0]
		for _, h := range capacity {
			snap.Usage.Capacity = append(snap.Usage.Capacity, sched.UsageRecord{Age: now - h.at, Hours: h.hours})
		}
		referenceShare(snap, queues, second, hours, res.reference)
		plan := sched.Schedule(snap)
		res.evictions += float64(len(plan.Evictions))
		for _, qs := range plan.Queues {
			f := float64(qs.FairShare[sched.GPU]) / float64(sched.OneGPU) * hours
			res.fair[qs.Name] += f
			if second {
				res.fairSecond[qs.Name] += f
			}
		}
		advance(snap, &plan, s, make([]int, len(snap.Jobs)))
		held := map[string]float64{}
		for i := range snap.Jobs {
			for _, t := range snap.Jobs[i].Tasks {
				if t.Status == sched.Running {
					held[snap.Jobs[i].Queue] += float64(t.GPU) / float64(sched.OneGPU)
				}
			}
		}
		for _, q := range queues {
			res.realized[q] += held[q] * hours
			if second {
				res.realSecond[q] += held[q] * hours
			}
			history[q] = append(history[q], sample{at: now + step, hours: [3]float64{held[q] * hours}})
		}
		capacity = append(capacity, sample{at: now + step, hours: [3]float64{2 * gpusNode * hours}})
		// Jobs that ran their length finish: they release this cycle and
		// are gone by the next; jobs with no task left are dropped.
		jobs := snap.Jobs[:0]
		for _, j := range snap.Jobs {
			if len(j.Tasks) == 0 {
				continue
			}
			for t := range j.Tasks {
				if j.Tasks[t].Status == sched.Running && j.Tasks[t].Runtime >= jobLen {
					j.Tasks[t].Status = sched.Releasing
				}
			}
			jobs = append(jobs, j)
		}
		snap.Jobs = jobs
	}
	return res
}

// referenceShare adds one cycle of the unrounded fair share to ref, from
// the time-based fair share design's formula written out for this flat
// cluster: 2 GPUs deserved each, the other GPUs split by
// P = max(0, w + k(w - u)) among the active queues, where u is the
// queue's decayed GPU-hours over the decayed capacity-hours.
func referenceShare(snap *sched.Snapshot, queues []string, second bool, hours float64, ref map[string]float64) {
	u := snap.Usage
	decay := func(age time.Duration) float64 { return math.Exp2(-float64(age) / float64(u.HalfLife)) }
	var capHours float64
	for _, r := range u.Capacity {
		if r.Age <= u.Window {
			capHours += r.Hours[sched.GPU] * decay(r.Age)
		}
	}
	active := queues
	if !second {
		active = queues[:3]
	}
	w := 1 / float64(len(active))
	p := map[string]float64{}
	var sum float64
	for _, q := range active {
		var used float64
		for _, r := range u.Queues[q] {
			if r.Age <= u.Window {
				used += r.Hours[sched.GPU] * decay(r.Age)
			}
		}
		if capHours > 0 {
			used /= capHours
		}
		p[q] = math.Max(0, w+u.K*(w-used))
		sum += p[q]
	}
	over := 16 - 2*float64(len(active))
	for _, q := range active {
		ref[q] += (2 + over*p[q]/sum) * hours
	}
}

// TestTimeBasedFairShareOverAWeek checks KAI's time-based fair share over
// a simulated week (docs/time-based-fairshare/README.md): four queues of
// equal quota, d idle for the first half. Every queue's realized
// GPU-hours stay within 2% of the GPU-hours its computed fair share adds
// up to, and d, having no usage, gets more than a quarter of the cluster
// in the second half, which it would not with k = 0. The figures are in
// docs/scheduler.md ("A simulated week").
func TestTimeBasedFairShareOverAWeek(t *testing.T) {
	res := simulateWeek(1, 24*time.Hour)
	flat := simulateWeek(0, 24*time.Hour)
	for _, q := range []string{"a", "b", "c", "d"} {
		t.Logf("queue %s: realized %.1f GPU-hours, fair share %.1f, unrounded formula %.1f; second half realized %.1f; with k=0 realized %.1f",
			q, res.realized[q], res.fair[q], res.reference[q], res.realSecond[q], flat.realized[q])
	}
	t.Logf("evictions %v; deviation from fair share %.2f%%, from the unrounded formula %.2f%%",
		res.evictions, 100*res.deviation(res.fair), 100*res.deviation(res.reference))
	if d := res.deviation(res.fair); d > 0.02 {
		t.Errorf("realized GPU-hours deviate %.2f%% from the fair share, want within 2%%", 100*d)
	}
	// KAI rounds over-quota shares down to whole GPUs and hands the units
	// left one per queue to the largest remainders
	// (resource_division.divideRemainingResource): in the second half d's
	// share of about 4.7 loses to three remainders of 0.77, so d realizes
	// about 5% less than the unrounded formula. The reference guards the
	// formula itself, not the rounding.
	if d := res.deviation(res.reference); d > 0.06 {
		t.Errorf("realized GPU-hours deviate %.2f%% from KAI's formula unrounded, want within 6%%", 100*d)
	}
	half := 16 * 84.0
	if res.realSecond["d"] <= half/4*1.05 {
		t.Errorf("d held %.1f of %.0f GPU-hours in the second half: want more than its quarter, as it used nothing before", res.realSecond["d"], half)
	}
	if math.Abs(flat.realSecond["d"]-half/4)/(half/4) > 0.02 {
		t.Errorf("with k = 0 d held %.1f GPU-hours in the second half, want its quarter %.0f", flat.realSecond["d"], half/4)
	}
}
