package daemon

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/sched"
	"gpud.dev/gpud/store"
)

// This file holds gpud-managed volumes ("host volumes") on the server's
// side: a `type: volume` with a gpud host backend (local, ssh,
// registered) is a record of its project (id "project/name"); a run's
// `volumes: - name: V` mounts it. The volume lives on no host until the
// first job that uses it is placed: the scheduler then binds it to that
// host in the same write as the job (bindVolumes), the agent makes its
// directory there, and from then on every job using it is kept on that
// host (volumeHostNeeds). Its data lives and dies with that host's
// agent; `gpud volume delete` and auto_cleanup_duration remove it
// (api_volumes.go). A volume of a project's backend (a Kubernetes claim)
// is another kind: volumes_backend.go.

// Volume record statuses.
const (
	volumeSubmitted = "submitted" // on no host yet
	volumeActive    = "active"    // its directory is on state.Instance
	volumeDeleting  = "deleting"  // being deleted: no job may bind it
)

// volumeState is what the server keeps in a volume record's Spec.
type volumeState struct {
	Config json.RawMessage `json:"config,omitempty"`
	// VolumeID names the volume's directory on its host's agent
	// (random: a re-created volume of the same name is a new directory).
	VolumeID string `json:"volume_id"`
	// Backend is the instance backend the volume's host must have.
	Backend  string    `json:"backend"`
	Instance string    `json:"instance,omitempty"`
	Hostname string    `json:"hostname,omitempty"`
	BoundAt  time.Time `json:"bound_at,omitzero"`
	// LastUsed is when a job using it was last placed or seen running.
	LastUsed    time.Time     `json:"last_used,omitzero"`
	Size        int64         `json:"size,omitempty"`
	AutoCleanup time.Duration `json:"auto_cleanup,omitempty"` // 0: never
	// BackendName, set, is the project's backend that holds the volume
	// (volumes_backend.go): VolumeID is then its volume id (the claim's
	// name), Backend is empty, and no host keeps it. Registered: an
	// existing claim (claim_name), never deleted by gpud. State is what
	// the backend said of it when it was applied (Pending, Bound).
	BackendName string `json:"backend_name,omitempty"`
	BackendType string `json:"backend_type,omitempty"`
	Registered  bool   `json:"registered,omitempty"`
	State       string `json:"state,omitempty"`
	// Requested is what a claim gpud made was made of (claimRequest).
	Requested string `json:"requested,omitempty"`
}

func volumeRecordID(project, name string) string { return project + "/" + name }

// volumeStateOf decodes a volume record's Spec.
func volumeStateOf(r store.Record) (volumeState, error) {
	var st volumeState
	if err := json.Unmarshal(r.Spec, &st); err != nil || st.VolumeID == "" {
		if err == nil {
			err = fmt.Errorf("no volume id")
		}
		return st, &corruptRecordError{Kind: r.Kind, ID: r.ID, Part: "spec", Err: err}
	}
	return st, nil
}

// volumeBackend maps a volume's backend to the instance backend of the
// hosts it may live on; "" for a backend gpud has no hosts of.
func volumeBackend(name string) string {
	switch strings.ToLower(name) {
	case "local":
		return "local"
	case "ssh", "remote":
		return "ssh"
	case "registered", "registration":
		return "registration"
	}
	return ""
}

// managedRef is the agent's reference to the volume of record r.
func managedRef(r store.Record, st volumeState) api.ManagedVolumeRef {
	return api.ManagedVolumeRef{Project: r.Project, ID: st.VolumeID, Name: r.Name, Backend: st.BackendName}
}

// volumeName is the name a run's volume entry resolves to on node n.
func volumeName(v api.VolumeMount, n nodeLayout, nodes int) (string, error) {
	name, err := api.Interpolate(v.Name, volumeResolver(n, nodes))
	if err != nil {
		return "", err
	}
	if err := checkName("name", name); err != nil {
		return "", fmt.Errorf("volume name %q: use 1-63 lowercase letters, digits, '-' or '_' (no '/' or '..')", name)
	}
	return name, nil
}

// managedVolume is the job volume of a run's `name:` entry on node n:
// the project's volume of that name, which must exist.
func (s *Server) managedVolume(project string, i int, v api.VolumeMount, n nodeLayout, nodes int) (api.JobVolume, error) {
	field := fmt.Sprintf("configuration.volumes[%d].name", i)
	name, err := volumeName(v, n, nodes)
	if err != nil {
		return api.JobVolume{}, badField(field, "%v", err)
	}
	rec, err := s.store.Volumes().Get(volumeRecordID(project, name))
	if err != nil {
		return api.JobVolume{}, badField(field, "volume %q does not exist in project %q; `gpud apply` a `type: volume` configuration first", name, project)
	}
	st, err := volumeStateOf(rec)
	if err != nil {
		return api.JobVolume{}, err
	}
	path, err := api.Interpolate(v.Path, volumeResolver(n, nodes))
	if err != nil {
		return api.JobVolume{}, badField(fmt.Sprintf("configuration.volumes[%d].path", i), "%v", err)
	}
	ref := managedRef(rec, st)
	return api.JobVolume{Path: path, Managed: &ref}, nil
}

// volumeHostNeeds adds, to a gang's needs, the hosts its managed volumes
// keep it on: the hosts its volumes live on (one per node of a gang with
// a volume per node: the selector is the gang's, so it allows each, and
// assignVolumeTasks gives each job the node of its own), or, for one on
// no host yet, hosts of its backend with its size free. A volume gone
// (deleted meanwhile) selects no host, and says so.
func (s *Server) volumeHostNeeds(needs []hostNeeds, specs map[string]jobRecordSpec, g []store.Record) []hostNeeds {
	seen := map[string]bool{}
	var hosts, names []string
	for _, j := range g {
		for _, v := range specs[j.ID].Spec.Volumes {
			if v.Managed == nil || seen[v.Managed.ID] {
				continue
			}
			seen[v.Managed.ID] = true
			rec, err := s.store.Volumes().Get(volumeRecordID(v.Managed.Project, v.Managed.Name))
			st, serr := volumeStateOf(rec)
			switch {
			case err != nil || serr != nil || st.VolumeID != v.Managed.ID || rec.Status == volumeDeleting:
				needs = append(needs, hostNeeds{Hosts: "-", VolumeName: v.Managed.Name}) // no host: the volume is gone
			case st.onBackend():
				needs = append(needs, hostNeeds{VolumeBackend: st.BackendName, VolumeName: v.Managed.Name})
			case st.Instance != "":
				if !slices.Contains(hosts, st.Instance) {
					hosts = append(hosts, st.Instance)
				}
				names = append(names, v.Managed.Name)
			default:
				needs = append(needs, hostNeeds{Backends: st.Backend, DiskMin: st.Size, VolumeName: v.Managed.Name})
			}
		}
	}
	if len(hosts) > 0 {
		slices.Sort(hosts)
		needs = append(needs, hostNeeds{Hosts: strings.Join(hosts, "\n"), VolumeName: strings.Join(names, ", ")})
	}
	return needs
}

// hostsMatch reports whether h is a host n's volumes allow.
func hostsMatch(h placeHost, n hostNeeds) bool {
	if n.VolumeBackend != "" {
		return false // a backend's claim: no host has it
	}
	if n.Hosts != "" && !slices.Contains(strings.Split(n.Hosts, "\n"), h.id) {
		return false
	}
	return n.Backends == "" || slices.Contains(strings.Split(n.Backends, "\n"), h.backend)
}

// describeVolume says what n's volume needs, for a pending job's reason.
func describeVolume(n hostNeeds) string {
	switch {
	case n.Hosts == "-":
		return "volume " + n.VolumeName + ", which was deleted"
	case n.VolumeBackend != "":
		return "the backend " + n.VolumeBackend + " that volume " + n.VolumeName + " is a claim of"
	case strings.Contains(n.Hosts, "\n"):
		return "the hosts " + strings.ReplaceAll(n.Hosts, "\n", ", ") + " that volumes " + n.VolumeName + " live on"
	case n.Hosts != "":
		return "the host " + n.Hosts + " that volume " + n.VolumeName + " lives on"
	case n.Backends != "":
		return "a " + n.Backends + " host for volume " + n.VolumeName
	}
	return ""
}

// volumeBind is one placement's volumes to bind to its node.
type volumeBind struct {
	job  string // the sched job (gang) the placement is of
	node string
	refs []api.ManagedVolumeRef
}

// bindVolumes binds the volumes of the cycle's placements to their
// nodes: a volume on no host goes to the node of the first placement
// that uses it; a gang any of whose placements would use a volume on
// another node (two gangs placed in one cycle), or one that is being
// deleted, is held back to the next cycle, whose selector keeps it on
// the volume's host. It returns the volume records to write with the
// binds and the gangs held back.
func (s *Server) bindVolumes(binds []volumeBind, now time.Time) ([]store.Mutation, map[string]bool) {
	type pending struct {
		rec store.Record
		st  volumeState
	}
	vols := map[string]*pending{}
	load := func(ref api.ManagedVolumeRef) *pending {
		id := volumeRecordID(ref.Project, ref.Name)
		if p, ok := vols[id]; ok {
			return p
		}
		rec, err := s.store.Volumes().Get(id)
		if err != nil {
			return nil
		}
		st, err := volumeStateOf(rec)
		if err != nil || st.VolumeID != ref.ID || rec.Status == volumeDeleting {
			return nil
		}
		p := &pending{rec, st}
		vols[id] = p
		return p
	}
	held := map[string]bool{}
	byJob := map[string][]volumeBind{}
	var order []string
	for _, b := range binds {
		if _, ok := byJob[b.job]; !ok {
			order = append(order, b.job)
		}
		byJob[b.job] = append(byJob[b.job], b)
	}
	changed := map[string]bool{}
	for _, job := range order {
		// Check the whole gang first, then bind: a gang binds all its
		// volumes or none.
		ok := true
		claim := map[string]string{}
		for _, b := range byJob[job] {
			for _, ref := range b.refs {
				p := load(ref)
				if p != nil && p.st.onBackend() {
					// A backend's claim: the placement must be on its backend.
					if _, name, isBackend := backendOfNode(b.node); !isBackend || name != p.st.BackendName {
						ok = false
					}
					continue
				}
				host := ""
				if p != nil {
					host = p.st.Instance
				}
				if c, seen := claim[ref.ID]; seen && host == "" {
					host = c
				}
				if p == nil || host != "" && host != b.node {
					ok = false
				}
				claim[ref.ID] = b.node
			}
		}
		if !ok {
			held[job] = true
			continue
		}
		for _, b := range byJob[job] {
			for _, ref := range b.refs {
				p := load(ref)
				if p.st.Instance == "" && !p.st.onBackend() {
					p.st.Instance, p.st.BoundAt = b.node, now
					p.rec.Status = volumeActive
					if inst, err := s.store.Instances().Get(b.node); err == nil {
						if is, err := s.instanceSpec(inst); err == nil {
							p.st.Hostname = is.Host.Hostname
						}
					}
				}
				p.st.LastUsed = now
				changed[volumeRecordID(ref.Project, ref.Name)] = true
			}
		}
	}
	var muts []store.Mutation
	for id := range changed {
		p := vols[id]
		p.rec.Spec = encodeSpec(p.st)
		muts = append(muts, store.Update(p.rec))
		if p.st.BoundAt.Equal(now) {
			muts = append(muts, s.event(p.rec.Project, store.KindVolume, p.rec.ID, volumeActive, "lives on "+p.st.Instance+", the host of the first job that uses it"))
		}
	}
	return muts, held
}

// placementVolumes is what bindVolumes needs of one placement.
func placementVolumes(job string, node string, js jobRecordSpec) (volumeBind, bool) {
	b := volumeBind{job: job, node: node}
	for _, v := range js.Spec.Volumes {
		if v.Managed != nil {
			b.refs = append(b.refs, *v.Managed)
		}
	}
	return b, len(b.refs) > 0
}

// placedVolumes lists the managed volumes of a plan's placements (those
// bound now, not pipelined ones).
func placedVolumes(ps []sched.Placement, idx snapshotIndex) []volumeBind {
	var out []volumeBind
	for _, p := range ps {
		recs := idx.jobs[p.Job]
		if p.Pipelined || p.Task >= len(recs) {
			continue
		}
		js, err := jobSpecOf(recs[p.Task])
		if err != nil {
			continue // the cycle fails on it below
		}
		if b, ok := placementVolumes(p.Job, p.Node, js); ok {
			out = append(out, b)
		}
	}
	return out
}

// assignVolumeTasks lets a gang's like tasks trade places so that each
// job lands on the host its volumes live on: sched places a gang's tasks
// in order under one selector for the whole gang, so with a volume per
// node (name: data-${{ dstack.node_rank }}) it may put rank 0 on rank 1's
// host. Jobs whose requests are equal are interchangeable for the
// placement (same resources, same needs), so their placements are matched
// to them by volume host; a gang no matching fits is left as placed, and
// bindVolumes holds it back.
func (s *Server) assignVolumeTasks(ps []sched.Placement, idx snapshotIndex) {
	byJob := map[string][]int{}
	for i, p := range ps {
		if !p.Pipelined && p.Task < len(idx.jobs[p.Job]) {
			byJob[p.Job] = append(byJob[p.Job], i)
		}
	}
	for job, is := range byJob {
		if len(is) < 2 || len(is) > 64 {
			continue
		}
		recs := idx.jobs[job]
		tasks := make([]int, len(is))
		want := make([]string, len(is)) // by position in is: the host the task's volumes live on
		reqs := make([]taskRequest, len(is))
		managed := false
		for k, i := range is {
			t := ps[i].Task
			js, err := jobSpecOf(recs[t])
			if err != nil {
				managed = false
				break
			}
			tasks[k], reqs[k] = t, js.Request
			for _, v := range js.Spec.Volumes {
				if v.Managed == nil {
					continue
				}
				managed = true
				if h := s.volumeHost(*v.Managed); h != "" {
					want[k] = h
				}
			}
		}
		if !managed {
			continue
		}
		// assign[k] is the position in is (the placement) task k takes.
		assign := make([]int, len(is))
		used := make([]bool, len(is))
		var try func(k int) bool
		try = func(k int) bool {
			if k == len(is) {
				return true
			}
			for pos := range is {
				node := ps[is[pos]].Node
				if used[pos] || reqs[pos] != reqs[k] || want[k] != "" && want[k] != node {
					continue
				}
				used[pos], assign[k] = true, pos
				if try(k + 1) {
					return true
				}
				used[pos] = false
			}
			return false
		}
		if !try(0) {
			continue
		}
		for k := range is {
			ps[is[assign[k]]].Task = tasks[k]
		}
	}
}

// volumeHost is the host the volume ref names lives on ("" for none yet,
// or a volume gone).
func (s *Server) volumeHost(ref api.ManagedVolumeRef) string {
	rec, err := s.store.Volumes().Get(volumeRecordID(ref.Project, ref.Name))
	if err != nil {
		return ""
	}
	st, err := volumeStateOf(rec)
	if err != nil || st.VolumeID != ref.ID {
		return ""
	}
	return st.Instance
}
