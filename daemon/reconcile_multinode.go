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
//
// A corrupt record of the run is an error: the order is then unknown.
func (s *reconciler) startupBlocked(j store.Record) (bool, error) {
	run, err := s.store.Runs().Get(j.Run)
	if err != nil {
		return false, nil
	}
	st, err := s.runSpec(run)
	if err != nil || st.StartupOrder == "" {
		return false, err
	}
	js, err := s.jobSpec(j)
	if err != nil {
		return false, err
	}
	master := js.NodeRank == 0
	var first func(rank int) bool // the nodes that must run before j
	switch {
	case st.StartupOrder == api.StartupMasterFirst && !master:
		first = func(rank int) bool { return rank == 0 }
	case st.StartupOrder == api.StartupWorkersFirst && master:
		first = func(rank int) bool { return rank != 0 }
	default:
		return false, nil
	}
	for _, o := range s.store.Jobs().ByRun(j.Run) {
		os, err := s.jobSpec(o)
		if err != nil {
			return false, err
		}
		if os.Attempt == st.Attempt && first(os.NodeRank) && o.Status != store.JobRunning && !finishedJob(o.Status) {
			return true, nil
		}
	}
	return false, nil
}

// startWaiting dispatches the jobs of run that waited for their startup
// order, once a job of the run is running.
func (s *reconciler) startWaiting(runID string) {
	for _, j := range s.store.Jobs().ByRun(runID) {
		if j.Status == store.JobProvisioning {
			s.dispatcher.dispatch(j.ID)
		}
	}
}

// masterDone returns the mutations that stop a master-done run's workers
// once its master (node rank 0) has ended, or nil; jobs are the current
// attempt's, with their decoded specs in specs.
func (s *reconciler) masterDone(run store.Record, st runState, jobs []store.Record, specs []jobRecordSpec) ([]store.Mutation, error) {
	if st.StopCriteria != api.StopMasterDone || st.MasterDone || st.Stop {
		return nil, nil
	}
	var master *store.Record
	for i := range jobs {
		if specs[i].NodeRank == 0 {
			master = &jobs[i]
		}
	}
	if master == nil || !finishedJob(master.Status) {
		return nil, nil
	}
	reason := "the master node ended (stop_criteria: master-done)"
	muts, err := s.stopMutations(run, false, reason)
	if err != nil {
		return nil, err
	}
	st.MasterDone = true
	run.Spec = encodeSpec(st)
	run.Status, run.Reason = store.RunTerminating, reason
	muts[0] = store.Update(run)
	return muts, nil
}
