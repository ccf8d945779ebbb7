package daemon

import (
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// A multi-node task's jobs are bound together (one gang) and then started
// in its startup_order, and it ends by its stop_criteria.

// startupBlocked reports whether job j (bound, not yet started) must wait
// for other nodes of its run to run first: the workers under master-first,
// the master (node rank 0) under workers-first.
func (s *Server) startupBlocked(j store.Record) bool {
	run, err := s.store.Runs().Get(j.Run)
	if err != nil {
		return false
	}
	st := cachedSpecOf[runState](&s.specs, run)
	if st.StartupOrder == "" {
		return false
	}
	master := cachedSpecOf[jobState](&s.specs, j).NodeRank == 0
	var first func(rank int) bool // the nodes that must run before j
	switch {
	case st.StartupOrder == api.StartupMasterFirst && !master:
		first = func(rank int) bool { return rank == 0 }
	case st.StartupOrder == api.StartupWorkersFirst && master:
		first = func(rank int) bool { return rank != 0 }
	default:
		return false
	}
	for _, o := range s.store.Jobs().ByRun(j.Run) {
		os := cachedSpecOf[jobState](&s.specs, o)
		if os.Attempt == st.Attempt && first(os.NodeRank) && o.Status != store.JobRunning && !finishedJob(o.Status) {
			return true
		}
	}
	return false
}

// startWaiting dispatches the jobs of run that waited for their startup
// order, once a job of the run is running.
func (s *Server) startWaiting(runID string) {
	for _, j := range s.store.Jobs().ByRun(runID) {
		if j.Status == store.JobProvisioning {
			s.dispatch(j.ID)
		}
	}
}

// masterDone returns the mutations that stop a master-done run's workers
// once its master (node rank 0) has ended, or nil.
func (s *Server) masterDone(run store.Record, st runState, jobs []store.Record) []store.Mutation {
	if st.StopCriteria != api.StopMasterDone || st.MasterDone || st.Stop {
		return nil
	}
	var master *store.Record
	for i, j := range jobs {
		if cachedSpecOf[jobState](&s.specs, j).NodeRank == 0 {
			master = &jobs[i]
		}
	}
	if master == nil || !finishedJob(master.Status) {
		return nil
	}
	reason := "the master node ended (stop_criteria: master-done)"
	muts := s.stopMutations(run, false, reason)
	st.MasterDone = true
	run.Spec = encodeSpec(st)
	run.Status, run.Reason = store.RunTerminating, reason
	muts[0] = store.Update(run)
	return muts
}
