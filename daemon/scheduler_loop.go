package daemon

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/sched"
	"gpud.dev/gpud/store"
)

// scheduler owns the scheduling loop: it turns the store's queues, runs,
// jobs and instances into a sched.Snapshot, commits the plan sched.Schedule
// returns and dispatches what it binds; it also samples queue usage for
// time-based fair share.
type scheduler struct {
	*Server
	// shares are the queues' fair shares of the last cycle, for the
	// queues API.
	sharesMu sync.Mutex
	shares   map[string]sched.QueueShare
}

// kick wakes a loop without blocking: one pending wake-up is enough.
func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// schedulerLoop runs a cycle whenever the change feed reports something
// that can change a placement (a job, queue or instance), and every
// resync interval as a safety net.
func (s *scheduler) schedulerLoop(ctx context.Context) {
	tick := time.NewTicker(s.opts.ResyncInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.schedWake:
		case <-tick.C:
		}
		if err := s.cycle(ctx); err != nil && ctx.Err() == nil {
			if errors.Is(err, store.ErrConflict) {
				kick(s.schedWake) // something changed under the plan: plan again
				continue
			}
			s.log.Error().Err(err).Msg("scheduling cycle failed")
		}
	}
}

// snapshotIndex remembers, for one cycle, which records the scheduler's
// names refer to.
type snapshotIndex struct {
	jobs  map[string][]store.Record // sched job name -> job records, by task index
	share map[string]sched.QueueShare
}

// cycle takes a snapshot, schedules it, commits the whole plan in one
// transaction and dispatches the binds.
func (s *scheduler) cycle(ctx context.Context) error {
	now := s.now()
	snap, idx := s.snapshot(now)
	plan := sched.Schedule(snap)
	var muts []store.Mutation
	var binds []string
	var nodes map[string]*sched.Node // by name, made at the first bind
	s.assignVolumeTasks(plan.Placements, idx)
	muts, held := s.bindVolumes(placedVolumes(plan.Placements, idx), now)
	for _, p := range plan.Placements {
		if p.Pipelined || held[p.Job] {
			if p.Pipelined {
				muts = append(muts, s.pipelinedWait(p, idx, &plan)...) // why it waits (reason_names.go)
			}
			continue // binds once the capacity is freed (or its volume's host is known), in a later cycle
		}
		recs := idx.jobs[p.Job]
		if p.Task >= len(recs) {
			continue
		}
		j := recs[p.Task]
		js, err := jobSpecOf(j)
		if err != nil {
			return err // the snapshot left corrupt jobs out: the record changed under the plan
		}
		j.Status, j.Instance, j.Reason = store.JobProvisioning, p.Node, "placed on "+p.Node+" by "+string(p.Action)
		js.Devices, js.BoundAt, js.WhyPending = p.Devices, now, ""
		js.Price = s.placedPrice(nodeOf(snap, p.Node, &nodes), len(p.Devices))
		j.Spec = encodeSpec(js)
		muts = append(muts, store.Update(j), s.event(j.Project, store.KindJob, j.ID, j.Status, j.Reason))
		binds = append(binds, j.ID)
	}
	for _, e := range plan.Evictions {
		recs := idx.jobs[e.Job]
		if e.Task >= len(recs) {
			continue
		}
		j := recs[e.Task]
		js, err := jobSpecOf(j)
		if err != nil {
			return err
		}
		js.Evicted = true
		j.Spec = encodeSpec(js)
		j.Status, j.Reason = store.JobTerminating, string(e.Action)+": "+e.Reason
		muts = append(muts, store.Update(j), s.event(j.Project, store.KindJob, j.ID, j.Status, j.Reason))
	}
	for name, why := range plan.Pending {
		for _, j := range idx.jobs[name] {
			if j.Status != store.JobSubmitted || j.Instance != "" {
				continue
			}
			why := s.autoscaleJobReason(j, why) // what its fleet provisions for it (fleet_autoscale.go)
			if cur, err := s.jobSpec(j); err != nil || cur.WhyPending == why {
				continue // (a corrupt job is not in the snapshot, and was logged)
			}
			js, err := jobSpecOf(j)
			if err != nil {
				return err
			}
			js.WhyPending = why
			j.Spec = encodeSpec(js)
			muts = append(muts, store.Update(j))
		}
	}
	s.sharesMu.Lock()
	s.shares = map[string]sched.QueueShare{}
	for _, q := range plan.Queues {
		s.shares[q.Name] = q
	}
	s.sharesMu.Unlock()
	if len(muts) == 0 {
		return nil
	}
	if _, err := s.store.Apply(ctx, muts...); err != nil {
		return err
	}
	for _, id := range binds {
		s.dispatcher.dispatch(id)
	}
	return nil
}

// projectLabel is the node label naming the project a host serves ("" for
// the hosts of shared fleets).
const projectLabel = "project"

// projectNodes keeps a project's jobs on its own fleets' hosts and the
// shared fleets': a host registered to another project never receives
// them, nor the secrets resolved into them.
func projectNodes(project string) sched.NodeSelector {
	return sched.NodeSelector{Key: projectLabel, Values: []string{"", project}, Name: "project " + strconv.Quote(project) + " (its fleets or shared ones)"}
}

// activeJob reports whether a job holds or waits for capacity.
func activeJob(status string) bool {
	switch status {
	case store.JobSubmitted, store.JobProvisioning, store.JobPulling, store.JobRunning, store.JobTerminating:
		return true
	}
	return false
}

// snapshot builds the scheduler's input from the store's in-memory indexes.
func (s *scheduler) snapshot(now time.Time) (*sched.Snapshot, snapshotIndex) {
	snap := &sched.Snapshot{Usage: s.usageSnapshot(now)}
	idx := snapshotIndex{jobs: map[string][]store.Record{}}
	for _, inst := range s.store.Instances().List() {
		if inst.Status == store.InstanceTerminated || inst.Status == store.InstanceTerminating || s.agents.get(inst.ID) == nil {
			continue
		}
		st, err := s.instanceSpec(inst)
		if err != nil {
			continue // not offered: its capacity is unknown (logged once by instanceSpec)
		}
		// A host serves its fleet's project only ("" for a shared fleet:
		// every project); a host whose fleet is gone serves nobody.
		f, err := s.store.Fleets().Get(inst.Fleet)
		if err != nil {
			continue
		}
		node := sched.Node{Name: inst.ID, CPU: int64(st.Host.CPUs) * 1000, Memory: int64(st.Host.Memory),
			Labels: map[string]string{"fleet": inst.Fleet, projectLabel: f.Project, runtimeLabel: st.Host.Runtime, backendLabel: st.Backend}}
		for _, d := range st.Host.Accelerators.Devices {
			node.Devices = append(node.Devices, sched.Device{Index: d.Index, Name: gpuModel(d.Name), Memory: d.MemoryTotal})
		}
		snap.Nodes = append(snap.Nodes, node)
	}
	// Job backends' offers are nodes too (backend_capacity.go).
	snap.Nodes = append(snap.Nodes, s.backendCapacityNodes()...)
	pl := newPlacer(s.Server, snap.Nodes)
	var corruptQueue map[string]bool
	snap.Queues, corruptQueue = s.schedQueues()
	snap.Topologies = append(snap.Topologies, fleetTopology())
	caps := s.newFleetCaps() // backend fleets' nodes max (fleet_backend.go)
	byRun := map[string][]store.Record{}
	var runIDs []string
	for _, status := range []string{store.JobSubmitted, store.JobProvisioning, store.JobPulling, store.JobRunning, store.JobTerminating} {
		for _, j := range s.store.Jobs().ByStatus(status) {
			if _, ok := byRun[j.Run]; !ok {
				runIDs = append(runIDs, j.Run)
			}
			byRun[j.Run] = append(byRun[j.Run], j)
		}
	}
	runs := make([]store.Record, 0, len(runIDs))
	for _, id := range runIDs {
		if r, err := s.store.Runs().Get(id); err == nil {
			runs = append(runs, r)
		}
	}
	sort.Slice(runs, func(i, j int) bool {
		if !runs[i].CreatedAt.Equal(runs[j].CreatedAt) {
			return runs[i].CreatedAt.Before(runs[j].CreatedAt)
		}
		return runs[i].ID < runs[j].ID
	})
runs:
	for _, run := range runs {
		rs, err := s.runSpec(run)
		if err != nil || corruptQueue[run.Queue] {
			continue // a corrupt run, or one in a corrupt queue, is not scheduled (logged once)
		}
		jobs := byRun[run.ID]
		sort.Slice(jobs, func(a, b int) bool { return jobs[a].ID < jobs[b].ID })
		specs := make(map[string]jobRecordSpec, len(jobs))
		for _, j := range jobs {
			js, err := s.jobSpec(j)
			if err != nil {
				continue runs // nor is a run with a corrupt job: its gang is not known whole
			}
			specs[j.ID] = js
		}
		if nb := specs[jobs[0].ID].NotBefore; !nb.IsZero() && nb.After(now) {
			continue // a cron run waits for its tick
		}
		// A service's replicas are scheduled one by one; a task's nodes
		// are one gang.
		groups := [][]store.Record{jobs}
		if rs.Type == api.KindService {
			groups = nil
			for _, j := range jobs {
				groups = append(groups, []store.Record{j})
			}
		}
		for _, g := range groups {
			name := run.ID
			if rs.Type == api.KindService {
				name = g[0].ID
			}
			sj := sched.Job{Name: name, Queue: run.Queue, Priority: rs.Priority, Preemptible: rs.Preemptible, MinMembers: min(max(rs.MinNodes, 1), len(g)),
				Nodes: projectNodes(run.Project)}
			sj.Nodes.And = rs.Targets.selector()
			switch rs.Type {
			case api.KindTask:
			case api.KindService: // hosts, or job backends that run services (backend_features.go)
				sj.Nodes.And = append(sj.Nodes.And, featureSelector(plugins.FeatureService))
			default:
				sj.Nodes.And = append(sj.Nodes.And, hostsOnly("hosts (a "+string(rs.Type)+" does not run on a job backend)"))
			}
			if sel, ok := pl.selector(run.Project, rs.Place, s.volumeHostNeeds(groupNeeds(specs, g), specs, g)); ok {
				sj.Nodes.And = append(sj.Nodes.And, sel)
			}
			sj.Nodes.And = append(sj.Nodes.And, caps.gate(run, rs.Place, g)...)
			sj.Topology = gangTopology(rs.Type, len(g))
			for _, j := range g {
				js := specs[j.ID]
				t := sched.Task{GPU: js.Request.GPU, GPUName: gpuModels(js.Request.GPUName), GPUMemory: js.Request.GPUMemory,
					GPUMemoryMax: js.Request.GPUMemoryMax, CPU: js.Request.CPU, Memory: js.Request.Memory}
				switch {
				case j.Status == store.JobTerminating:
					t.Status, t.Node, t.Devices = sched.Releasing, j.Instance, slices.Clone(js.Devices)
				case j.Instance != "":
					t.Status, t.Node, t.Devices = sched.Running, j.Instance, slices.Clone(js.Devices)
					t.Runtime = now.Sub(js.BoundAt)
				}
				sj.Tasks = append(sj.Tasks, t)
			}
			idx.jobs[name] = g
			snap.Jobs = append(snap.Jobs, sj)
		}
	}
	return snap, idx
}

// gpuModel reduces a device name to its model ("NVIDIA H100 80GB HBM3" ->
// "H100") so requests by model match.
func gpuModel(name string) string {
	for _, f := range strings.Fields(strings.ToUpper(name)) {
		if f == "NVIDIA" || f == "TESLA" || f == "GEFORCE" || f == "AMD" || f == "INSTINCT" {
			continue
		}
		return strings.SplitN(f, "-", 2)[0]
	}
	return strings.ToUpper(name)
}

// usageLoop records what running jobs hold, per queue, once a minute, for
// time-based fair share.
func (s *scheduler) usageLoop(ctx context.Context) {
	const every = time.Minute
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			now := s.now()
			perQueue := map[string]map[string]float64{}
			for _, j := range s.store.Jobs().ByStatus(store.JobRunning) {
				js, err := s.jobSpec(j)
				if err != nil {
					continue // its request is unknown (logged once by jobSpec)
				}
				m := perQueue[j.Queue]
				if m == nil {
					m = map[string]float64{}
					perQueue[j.Queue] = m
				}
				sec := every.Seconds()
				m["gpu"] += float64(js.Request.GPU) / 1000 * sec
				m["cpu"] += float64(js.Request.CPU) / 1000 * sec
				m["memory"] += float64(js.Request.Memory) * sec
			}
			var muts []store.Mutation
			for q, m := range perQueue {
				muts = append(muts, store.AddUsage(q, now, m))
			}
			if len(muts) > 0 {
				if _, err := s.store.Apply(ctx, muts...); err != nil && ctx.Err() == nil {
					s.log.Warn().Err(err).Msg("record usage")
				}
			}
		}
	}
}
