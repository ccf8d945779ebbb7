package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	agentclient "gpud.dev/gpud/agent/client"
	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// The volumes API: `gpud apply` of a `type: volume` (any project member;
// re-applying another member's volume needs a manager, as it could shorten
// its auto_cleanup_duration), `gpud volume list` (any member) and `gpud
// volume delete` (the volume's creator or a manager: deleting destroys
// data other members' runs may rely on, yet a user must be able to clean
// up what they made). A volume an active run uses is never deleted. A
// volume of a project's backend (volumes_backend.go) is made by the
// backend at apply time and deleted there by delete.

func (s *fleetsAPI) handleApplyVolume(w http.ResponseWriter, r *http.Request) error {
	project, c, cfg, err := s.readApplyConfig(w, r, api.RoleUser)
	if err != nil {
		return err
	}
	v := cfg.Volume
	if v == nil {
		return badField("configuration.type", "%s is not a volume; apply it with the matching endpoint", cfg.Kind)
	}
	if v.Name == "" {
		return badField("configuration.name", "name the volume: runs mount it by name (volumes: - name: NAME path: /data)")
	}
	if err := checkName("configuration.name", v.Name); err != nil {
		return err
	}
	// backend "" is a project's backend (a Kubernetes claim, made
	// below), not gpud's hosts.
	backend := volumeBackend(v.Backend)
	id := volumeRecordID(project, v.Name)
	st := volumeState{VolumeID: newID(), Backend: backend}
	rec := store.Record{Kind: store.KindVolume, ID: id, Project: project, Name: v.Name, User: c.name, Status: volumeSubmitted}
	old, oldErr := s.store.Volumes().Get(id)
	if oldErr == nil {
		if st, err = volumeStateOf(old); err != nil {
			return err
		}
		if old.User != c.name {
			if _, _, err := s.authorize(r, api.RoleManager); err != nil {
				return forbidden("volume %q was created by %s; only they or a project manager may change it", v.Name, old.User)
			}
		}
		if old.Status == volumeDeleting {
			return conflict("volume %q is being deleted; apply it again once it is gone", v.Name)
		}
		if st.Instance != "" && st.Backend != backend {
			return conflict("volume %q lives on host %s (backend %s); delete it first to move it to backend %s", v.Name, st.Instance, st.Backend, v.Backend)
		}
		if st.onBackend() && backend != "" {
			return conflict("volume %q is the claim %s of backend %s; delete it first to make it a host volume", v.Name, st.VolumeID, st.BackendName)
		}
		if !st.onBackend() {
			st.Backend = backend
		}
		rec = old
	}
	if backend == "" {
		if oldErr == nil && !st.onBackend() {
			if st.Instance != "" {
				return conflict("volume %q lives on host %s; delete it first to move it to backend %s", v.Name, st.Instance, v.Backend)
			}
			st = volumeState{} // on no host yet: it becomes the backend's
		}
		// The backend makes (or finds) the claim before anything is
		// stored: an error leaves the stored volume as it was.
		if err := s.createBackendVolume(r.Context(), project, v, &st); err != nil {
			return err
		}
		rec.Status = volumeActive
	}
	norm, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	size := int64(v.Size)
	if st.onBackend() {
		size = st.Size // the claim's, as the backend answered
	}
	st.Config, st.Size, st.AutoCleanup = norm, size, 0
	if d := v.AutoCleanupDuration; d != nil && !d.Off {
		st.AutoCleanup = d.Value
	}
	rec.Spec = encodeSpec(st)
	mut := store.Update(rec)
	if rec.Version == 0 {
		mut = store.Create(rec)
	}
	if _, err := s.store.Apply(r.Context(), mut, s.event(project, store.KindVolume, id, "applied", "applied by "+c.name)); err != nil {
		if errors.Is(err, store.ErrExists) || isConflict(err) {
			return conflict("volume %q changed meanwhile; apply again", v.Name)
		}
		return err
	}
	rec, err = s.store.Volumes().Get(id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.volumeOut(r.Context(), rec, false))
	return nil
}

func isConflict(err error) bool {
	var ce *store.ConflictError
	return errors.As(err, &ce)
}

func (s *fleetsAPI) handleListVolumes(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	out := []api.Volume{}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	for _, rec := range s.store.Volumes().ByProject(project) {
		out = append(out, s.volumeOut(ctx, rec, true))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *fleetsAPI) handleDeleteVolume(w http.ResponseWriter, r *http.Request) error {
	project, c, have, err := s.authorizeRole(r, api.RoleUser)
	if err != nil {
		return err
	}
	name := r.PathValue("volume")
	rec, err := s.store.Volumes().Get(volumeRecordID(project, name))
	if err != nil || rec.Project != project {
		return notFound("volume", name)
	}
	if rec.User != c.name && !c.admin && roleRank(have) < roleRank(api.RoleManager) {
		return forbidden("volume %q was created by %s; only they or a project manager may delete it", name, rec.User)
	}
	if err := s.deleteVolume(r.Context(), rec, "deleted by "+c.name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// volumeRuns names the unfinished runs of the volume's project that use
// it (any of their jobs, active or between retries, mounts it), and the
// latest end of a job that used it.
func (s *Server) volumeRuns(rec store.Record, st volumeState) (runs []string, lastEnd time.Time) {
	for _, run := range s.store.Runs().ByProject(rec.Project) {
		finished := finishedRun(run.Status)
		for _, j := range s.store.Jobs().ByRun(run.ID) {
			js, err := s.jobSpec(j)
			if err != nil {
				// Unknown volumes: count an unfinished run as a user.
				if !finished && !slices.Contains(runs, run.Name) {
					runs = append(runs, run.Name)
				}
				continue
			}
			if !slices.ContainsFunc(js.Spec.Volumes, func(v api.JobVolume) bool { return v.Managed != nil && v.Managed.ID == st.VolumeID }) {
				continue
			}
			if !finished && !slices.Contains(runs, run.Name) {
				runs = append(runs, run.Name)
			}
			if js.FinishedAt.After(lastEnd) {
				lastEnd = js.FinishedAt
			}
		}
	}
	slices.Sort(runs)
	return runs, lastEnd
}

// deleteVolume deletes a volume no unfinished run uses: it is marked
// deleting (so no job binds it meanwhile), its host's agent removes its
// directory, then the record goes. A host that is not connected keeps
// the volume (its data would stay behind); a host that is gone does not.
func (s *Server) deleteVolume(ctx context.Context, rec store.Record, why string) error {
	st, err := volumeStateOf(rec)
	if err != nil {
		return err
	}
	if runs, _ := s.volumeRuns(rec, st); len(runs) > 0 {
		return conflict("volume %q is used by active runs: %s; stop them first (gpud stop RUN)", rec.Name, strings.Join(runs, ", "))
	}
	prev := rec.Status
	if rec.Status != volumeDeleting {
		rec.Status, rec.Reason = volumeDeleting, why
		if _, err := s.store.Apply(ctx, store.Update(rec)); err != nil {
			if isConflict(err) {
				return conflict("volume %q changed meanwhile (a job may have started on it); try again", rec.Name)
			}
			return err
		}
		if rec, err = s.store.Volumes().Get(rec.ID); err != nil {
			return err
		}
	}
	// A run submitted between the check and the mark would now be held
	// back: check again before any byte is removed.
	restore := func(cause error) error {
		rec.Status = prev
		if _, err := s.store.Apply(context.WithoutCancel(ctx), store.Update(rec)); err != nil {
			s.log.Warn().Err(err).Str("volume", rec.ID).Msg("volume left marked deleting")
		}
		return cause
	}
	if runs, _ := s.volumeRuns(rec, st); len(runs) > 0 {
		return restore(conflict("volume %q is used by active runs: %s; stop them first (gpud stop RUN)", rec.Name, strings.Join(runs, ", ")))
	}
	if st.onBackend() {
		if err := s.deleteBackendVolume(ctx, rec.Name, rec.Project, st); err != nil {
			return restore(err)
		}
	}
	if st.Instance != "" {
		if _, err := s.store.Instances().Get(st.Instance); err == nil {
			link := s.agents.get(st.Instance)
			if link == nil || link.client == nil {
				return restore(conflict("volume %q lives on host %s, which is not connected now: deleting it would leave its data behind; try again when the host is back", rec.Name, st.Instance))
			}
			if err := link.client.RemoveVolume(ctx, managedRef(rec, st)); err != nil {
				var ae *agentclient.Error
				if errors.As(err, &ae) && ae.Status == http.StatusConflict {
					return restore(conflict("volume %q: %s", rec.Name, ae.Message))
				}
				return restore(apiErr(http.StatusBadGateway, api.CodeInternal, "", "volume %q: its host %s could not remove it: %v", rec.Name, st.Instance, err))
			}
		}
	}
	if _, err := s.store.Apply(ctx, store.Delete(store.KindVolume, rec.ID), s.event(rec.Project, store.KindVolume, rec.ID, "deleted", why)); err != nil {
		return err
	}
	return nil
}

// volumeOut is the API view of a volume; with usage, it asks the
// volume's host for the bytes it takes (best effort: -1 when the host
// does not answer).
func (s *Server) volumeOut(ctx context.Context, rec store.Record, usage bool) api.Volume {
	out := api.Volume{Name: rec.Name, Project: rec.Project, Status: rec.Status, CreatedAt: rec.CreatedAt, User: rec.User, Used: -1, Runs: []string{}}
	st, err := volumeStateOf(rec)
	if err != nil {
		out.Status = "corrupt"
		return out
	}
	out.Backend, out.Instance, out.Hostname, out.Size = st.Backend, st.Instance, st.Hostname, api.Size(st.Size)
	if st.onBackend() {
		out.Backend, out.BackendType, out.Claim, out.Registered, out.State = st.BackendName, st.BackendType, st.VolumeID, st.Registered, st.State
	}
	out.Configuration = st.Config
	if st.AutoCleanup > 0 {
		out.AutoCleanupDuration = st.AutoCleanup.String()
	}
	var lastEnd time.Time
	out.Runs, lastEnd = s.volumeRuns(rec, st)
	out.LastUsed = st.LastUsed
	if lastEnd.After(out.LastUsed) {
		out.LastUsed = lastEnd
	}
	if usage && st.onBackend() {
		s.refreshBackendVolume(ctx, rec.Project, rec.Name, st, &out)
	}
	if usage && st.Instance != "" {
		if link := s.agents.get(st.Instance); link != nil && link.client != nil {
			if u, err := link.client.VolumeUsage(ctx, managedRef(rec, st)); err == nil && u.Exists {
				out.Used = u.Used
			}
		}
	}
	return out
}

// volumeCleanupLoop deletes, every resync interval, the volumes unused
// for their auto_cleanup_duration, and keeps the last use of the others
// current while runs use them.
func (s *Server) volumeCleanupLoop(ctx context.Context) {
	tick := time.NewTicker(s.opts.ResyncInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.cleanupVolumes(ctx)
		}
	}
}

func (s *Server) cleanupVolumes(ctx context.Context) {
	now := s.now()
	for _, rec := range s.store.Volumes().List() {
		st, err := volumeStateOf(rec)
		if err != nil || st.AutoCleanup <= 0 {
			continue
		}
		runs, lastEnd := s.volumeRuns(rec, st)
		if len(runs) > 0 {
			if now.Sub(st.LastUsed) > s.opts.ResyncInterval {
				st.LastUsed = now
				rec.Spec = encodeSpec(st)
				if _, err := s.store.Apply(ctx, store.Update(rec)); err != nil && !isConflict(err) {
					s.log.Warn().Err(err).Str("volume", rec.ID).Msg("volume's last use not recorded")
				}
			}
			continue
		}
		last := rec.CreatedAt
		for _, t := range []time.Time{st.LastUsed, lastEnd, st.BoundAt} {
			if t.After(last) {
				last = t
			}
		}
		if now.Sub(last) < st.AutoCleanup {
			continue
		}
		why := "unused for " + st.AutoCleanup.String() + " (auto_cleanup_duration)"
		if err := s.deleteVolume(ctx, rec, why); err != nil {
			s.log.Info().Err(err).Str("volume", rec.ID).Msg("volume not cleaned up yet")
		}
	}
}
