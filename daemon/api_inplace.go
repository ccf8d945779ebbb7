package daemon

import (
	"encoding/json"
	"errors"
	"reflect"

	"gpud.dev/gpud/store"
)

// onlyPriorityChanged reports whether two normalized run configurations
// differ in nothing but priority (and preemptible, which a priority class
// implies).
func onlyPriorityChanged(a, b json.RawMessage) bool {
	var ma, mb map[string]any
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return false
	}
	if reflect.DeepEqual(ma["priority"], mb["priority"]) && reflect.DeepEqual(ma["preemptible"], mb["preemptible"]) {
		return false
	}
	for _, k := range []string{"priority", "preemptible"} {
		delete(ma, k)
		delete(mb, k)
	}
	return reflect.DeepEqual(ma, mb)
}

// applyPriorityInPlace updates an active run whose new configuration
// changes only its priority: the run keeps its jobs (running ones are not
// restarted) and the scheduler sees the new priority in its next cycle.
// It returns false when sub is not such a change.
func (s *runsAPI) applyPriorityInPlace(sub *submission, user string) (store.Record, bool, error) {
	next, err := decodeSpec[runState](sub.run)
	if err != nil {
		return store.Record{}, false, err
	}
	for attempt := range 10 {
		if attempt > 0 {
			conflictPause(attempt)
		}
		var active *store.Record
		for _, r := range s.store.Runs().ByProject(sub.run.Project) {
			if r.Name == sub.run.Name && !finishedRun(r.Status) {
				active = &r
			}
		}
		if active == nil {
			return store.Record{}, false, nil
		}
		st, err := decodeSpec[runState](*active)
		if err != nil || st.Stop || !onlyPriorityChanged(st.Config, next.Config) {
			return store.Record{}, false, err
		}
		reason := "priority changed in place by " + user
		st.Priority, st.Preemptible, st.Config = next.Priority, next.Preemptible, next.Config
		active.Spec = encodeSpec(st)
		_, err = s.store.Apply(s.ctx, store.Update(*active), s.event(active.Project, store.KindRun, active.ID, active.Status, reason))
		if err == nil {
			kick(s.schedWake)
			run, err := s.store.Runs().Get(active.ID)
			return run, true, err
		}
		if !errors.Is(err, store.ErrConflict) {
			return store.Record{}, false, err
		}
	}
	return store.Record{}, false, conflict("the run keeps changing; try again")
}
