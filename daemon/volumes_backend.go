package daemon

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
)

// Volumes on a project's backend (issue 17, "volumes become PVCs";
// docs/backends.md): a `type: volume` whose backend names one of the
// project's job backends that says volumes in its info (Kubernetes, by
// type or by name, as a run's backends field does) is made there by the
// backend's CreateVolume (a PersistentVolumeClaim) at apply time, and the
// record keeps the backend's volume id (the claim's name) as its
// VolumeID. claim_name registers an existing claim, which gpud never
// deletes. A run's `volumes: - name: V` entry then mounts the claim, and
// its jobs run only on that backend (hostNeeds.VolumeBackend): no host
// has the claim, and a gpud host volume keeps a job off every backend.

// volumeBackendTimeout bounds one call to a backend about a volume.
const volumeBackendTimeout = 30 * time.Second

// onBackend reports whether st is a volume of a project's backend.
func (st volumeState) onBackend() bool { return st.BackendName != "" }

// volumeBackendOf resolves a volume's backend field to one of project's
// backends: its name, or its type when exactly one backend has that type.
// The backend must run jobs and keep volumes (Info.Jobs and Volumes).
func (s *Server) volumeBackendOf(ctx context.Context, project, want string) (name, typ string, b plugins.Backend, err error) {
	type cand struct {
		name, typ, startErr string
		sup                 *plugins.Supervisor
	}
	var all []cand
	if s.backends != nil {
		s.backends.mu.Lock()
		for _, e := range s.backends.entries {
			if e.project == project {
				all = append(all, cand{e.name, e.typ, e.startErr, e.sup})
			}
		}
		s.backends.mu.Unlock()
	}
	slices.SortFunc(all, func(a, b cand) int { return strings.Compare(a.name, b.name) })
	var names []string
	for _, c := range all {
		names = append(names, c.name+" ("+c.typ+")")
	}
	var match []cand
	for _, c := range all {
		if c.name == strings.ToLower(want) {
			match = []cand{c}
			break
		}
		if strings.EqualFold(c.typ, want) {
			match = append(match, c)
		}
	}
	switch {
	case len(match) == 0:
		return "", "", nil, fmt.Errorf("no backend %q in project %q (its backends: %s): gpud keeps volumes on its own hosts (local, ssh, registered) or on a backend of the project that keeps volumes (gpud backend add, type: kubernetes)",
			want, project, orNone(names))
	case len(match) > 1:
		var ns []string
		for _, c := range match {
			ns = append(ns, c.name)
		}
		return "", "", nil, fmt.Errorf("project %q has several %s backends (%s): name one of them", project, want, strings.Join(ns, ", "))
	}
	c := match[0]
	if c.sup == nil {
		return "", "", nil, fmt.Errorf("backend %s (%s) is not running (its plugin did not start: %s): see gpud backend list", c.name, c.typ, c.startErr)
	}
	ictx, cancel := context.WithTimeout(ctx, volumeBackendTimeout)
	defer cancel()
	info, err := c.sup.Info(ictx)
	if err != nil {
		return "", "", nil, fmt.Errorf("backend %s (%s): %v", c.name, c.typ, err)
	}
	if !info.Volumes || !info.Jobs {
		return "", "", nil, fmt.Errorf("backend %s (%s) keeps no volumes that its jobs mount (its plugin says volumes %t, jobs %t)", c.name, c.typ, info.Volumes, info.Jobs)
	}
	return c.name, c.typ, c.sup, nil
}

// claimNameRE is a Kubernetes object name (a DNS-1123 subdomain).
var claimNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// backendVolumeSpec is what the backend is asked for: the volume's
// configuration, named project/name so that two projects' volumes of one
// name on one cluster are two claims. It refuses, by field, what a claim
// cannot be made of.
func backendVolumeSpec(project string, v *api.VolumeSpec) (api.VolumeSpec, error) {
	spec := *v
	spec.Name = project + "/" + v.Name
	spec.AutoCleanupDuration = nil
	if v.ClaimName != "" {
		if !claimNameRE.MatchString(v.ClaimName) {
			return spec, badField("configuration.claim_name", "volume %s: %q is not a Kubernetes object name (lowercase letters, digits, '-' and '.')", v.Name, v.ClaimName)
		}
		for field, set := range map[string]bool{"size": v.Size != 0, "storage_class_name": v.StorageClassName != "", "access_modes": len(v.AccessModes) > 0} {
			if set {
				return spec, badField("configuration."+field, "volume %s: claim_name registers the existing claim %s, which has its own %s; drop %s", v.Name, v.ClaimName, field, field)
			}
		}
		return spec, nil
	}
	if v.Size <= 0 {
		return spec, badField("configuration.size", "volume %s: a new claim needs a size (size: 100GB), or claim_name to register an existing claim", v.Name)
	}
	return spec, nil
}

// createBackendVolume asks the backend for the volume (idempotent: a claim
// made before is found again) and fills st with what it answered. An error
// names the volume and the field it concerns; nothing is stored then.
func (s *Server) createBackendVolume(ctx context.Context, project string, v *api.VolumeSpec, st *volumeState) error {
	name, typ, b, err := s.volumeBackendOf(ctx, project, v.Backend)
	if err != nil {
		return badField("configuration.backend", "volume %s: %v", v.Name, err)
	}
	if st.onBackend() && st.BackendName != name {
		return conflict("volume %q is on backend %s; delete it first to move it to backend %s", v.Name, st.BackendName, name)
	}
	if st.onBackend() && st.Registered != (v.ClaimName != "") || st.Registered && st.VolumeID != v.ClaimName {
		return conflict("volume %q is the claim %s; delete it first to make it another claim", v.Name, st.VolumeID)
	}
	spec, err := backendVolumeSpec(project, v)
	if err != nil {
		return err
	}
	// A claim is made once: a re-apply that asks for another one (a
	// size, class or modes the claim was not made with) would be ignored
	// by the backend, so it is refused.
	want := claimRequest(v)
	if st.onBackend() && !st.Registered && st.Requested != "" && st.Requested != want {
		return conflict("volume %q is the claim %s, made with %s; gpud does not change a claim (now %s): apply it unchanged, or delete it (its data goes) and apply it again",
			v.Name, st.VolumeID, st.Requested, want)
	}
	cctx, cancel := context.WithTimeout(ctx, volumeBackendTimeout)
	defer cancel()
	got, err := b.CreateVolume(cctx, spec)
	if err != nil {
		field := "configuration.backend"
		if v.ClaimName != "" {
			field = "configuration.claim_name"
		}
		return apiErr(400, api.CodeInvalidField, field, "volume %s: backend %s (%s): %v", v.Name, name, typ, err)
	}
	if got.ID == "" {
		return apiErr(502, api.CodeInternal, "configuration.backend", "volume %s: backend %s (%s) answered no volume id", v.Name, name, typ)
	}
	if st.onBackend() && st.VolumeID != got.ID {
		return conflict("volume %q is the claim %s, and the backend now names %s; delete it first", v.Name, st.VolumeID, got.ID)
	}
	st.VolumeID, st.Backend, st.BackendName, st.BackendType = got.ID, "", name, typ
	st.Registered, st.State, st.Size = v.ClaimName != "", got.State, int64(got.Size)
	if !st.Registered {
		st.Requested = want
	}
	return nil
}

// claimRequest says what a new claim is made of, to tell a re-apply that
// asks for another.
func claimRequest(v *api.VolumeSpec) string {
	class, modes := v.StorageClassName, strings.Join(v.AccessModes, ",")
	if class == "" {
		class = "the default class"
	}
	if modes == "" {
		modes = "ReadWriteOnce"
	}
	return fmt.Sprintf("size %s, %s, %s", v.Size, class, modes)
}

// deleteBackendVolume deletes the backend's claim of a volume gpud made;
// a registered claim is left as it is. A backend that is gone keeps the
// record (its claim would be left behind unseen).
func (s *Server) deleteBackendVolume(ctx context.Context, name string, project string, st volumeState) error {
	if st.Registered {
		return nil
	}
	b, ok := s.Backends(project)[st.BackendName]
	if !ok {
		return conflict("volume %q is the claim %s of backend %s, which is gone or not running: deleting the volume would leave the claim behind; add the backend again (or delete the claim in the cluster and then the volume)",
			name, st.VolumeID, st.BackendName)
	}
	dctx, cancel := context.WithTimeout(ctx, volumeBackendTimeout)
	defer cancel()
	if err := b.DeleteVolume(dctx, st.VolumeID); err != nil {
		return apiErr(502, api.CodeInternal, "", "volume %q: backend %s could not delete the claim %s: %v", name, st.BackendName, st.VolumeID, err)
	}
	return nil
}

// refreshBackendVolume reads the claim's state and size again (best
// effort, for `gpud volume list`): CreateVolume with the claim's name
// registers it, which reads it and changes nothing.
func (s *Server) refreshBackendVolume(ctx context.Context, project, name string, st volumeState, out *api.Volume) {
	b, ok := s.Backends(project)[st.BackendName]
	if !ok {
		out.State = "backend gone"
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := b.CreateVolume(rctx, api.VolumeSpec{Type: api.KindVolume, Name: project + "/" + name, Backend: st.BackendType, ClaimName: st.VolumeID})
	if err != nil {
		s.log.Debug().Err(err).Str("project", project).Str("volume", name).Msg("volume's claim not read")
		return
	}
	out.State = got.State
	if got.Size > 0 {
		out.Size = got.Size
	}
}

// backendVolumesOf names the volumes of project kept on backend name.
func (s *Server) backendVolumesOf(project, name string) []string {
	var out []string
	for _, rec := range s.store.Volumes().ByProject(project) {
		if st, err := volumeStateOf(rec); err == nil && st.BackendName == name {
			out = append(out, rec.Name)
		}
	}
	slices.Sort(out)
	return out
}

// backendJobVolumes keeps, of a job's volumes, the backend's own claims:
// what a job backend mounts (the rest is refused before a job gets there).
func backendJobVolumes(vols []api.JobVolume) []api.JobVolume {
	var out []api.JobVolume
	for _, v := range vols {
		if v.Managed != nil && v.Managed.Backend != "" {
			out = append(out, v)
		}
	}
	return out
}

// runVolumeStates resolves the `name:` volume entries of the checked run
// on every node: each volume's name and state (entries naming no volume
// are left out: checkManagedVolumeName refuses them).
func (fc *fieldCheck) runVolumeStates(only *api.VolumeMount) map[string]volumeState {
	out := map[string]volumeState{}
	if fc.srv == nil {
		return out
	}
	nodes := jobLayout(fc.cfg)
	replicaNodes := len(nodes)
	if fc.cfg.Service != nil {
		replicaNodes = 1
	}
	for _, v := range fc.run.Volumes {
		if v.Name == "" || only != nil && v != *only {
			continue
		}
		for _, n := range nodes {
			name, err := volumeName(v, n, replicaNodes)
			if err != nil {
				continue
			}
			rec, err := fc.srv.store.Volumes().Get(volumeRecordID(fc.project, name))
			if err != nil {
				continue
			}
			if st, err := volumeStateOf(rec); err == nil {
				out[name] = st
			}
		}
	}
	return out
}

// namesBackendVolume reports whether the `name:` entry v names a volume of
// a backend (on every node).
func (fc *fieldCheck) namesBackendVolume(v api.VolumeMount) bool {
	sts := fc.runVolumeStates(&v)
	if len(sts) == 0 {
		return false
	}
	for _, st := range sts {
		if !st.onBackend() {
			return false
		}
	}
	return true
}

// volumesNeedAHost is the backend target's refusal of volumes: it holds
// for a run with an instance volume or a gpud host volume, not for one
// whose volumes are all its backend's claims.
func volumesNeedAHost(fc *fieldCheck, _ string) bool {
	for _, v := range fc.run.Volumes {
		if v.Name == "" || !fc.namesBackendVolume(v) {
			return true
		}
	}
	return false
}
