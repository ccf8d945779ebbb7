package daemon

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// fleetsAPI serves the HTTP API of fleets, their instances and offers,
// their registration tokens (api_tokens.go) and of queues (api_queues.go).
type fleetsAPI struct{ *Server }

// Fleets: the built-in "local" fleet is shared by every project (record
// with no project); fleets applied from configurations belong to their
// project (record id "project/name"). This server registers their
// configuration; hosts join through agents' heartbeats.

// visibleFleet reports whether project may see the fleet record.
func visibleFleet(project string, f store.Record) bool {
	return f.Project == "" || f.Project == project
}

// fleetOut is the API view of a fleet; a corrupt fleet record is an
// error, a corrupt host of it is left out (logged once by instanceSpec).
func (s *fleetsAPI) fleetOut(project string, f store.Record) (api.Fleet, error) {
	cs, err := configSpecOf(f)
	if err != nil {
		return api.Fleet{}, err
	}
	out := api.Fleet{Name: f.Name, Project: f.Project, Status: f.Status, Configuration: cs.Config, CreatedAt: f.CreatedAt, Instances: []api.Instance{}}
	s.fleetOutBackend(&out, f) // a backend fleet's backends and nodes (fleet_backend.go)
	for _, inst := range s.store.Instances().ByFleet(f.ID) {
		io, err := s.instanceOut(inst)
		if err != nil {
			continue // logged once by the spec cache
		}
		s.machineOut(f.ID, &io) // a provisioned machine's price (fleet_autoscale.go)
		out.Instances = append(out.Instances, io)
	}
	return out, nil
}

// instanceOut is the API view of a host; it shows capacity, never other
// projects' jobs. A corrupt record of the instance or of a job on it is an
// error (its free capacity is unknown); listings and offers skip it, the
// record logged once by the spec cache.
func (s *fleetsAPI) instanceOut(inst store.Record) (api.Instance, error) {
	st, err := s.instanceSpec(inst)
	if err != nil {
		return api.Instance{}, err
	}
	out := api.Instance{ID: inst.ID, Name: inst.Name, Fleet: inst.Fleet, Backend: st.Backend, Status: inst.Status, Reason: inst.Reason,
		Hostname: st.Host.Hostname, Runtime: st.Host.Runtime}
	out.Resources = api.InstanceResources{CPUs: float64(st.Host.CPUs), Memory: st.Host.Memory, Disk: st.Host.Disk}
	for _, d := range st.Host.Accelerators.Devices {
		out.Resources.GPUs++
		out.Resources.GPUName, out.Resources.GPUMemory = gpuModel(d.Name), api.Size(d.MemoryTotal)
	}
	out.Free = out.Resources
	out.Free.Disk = s.agents.get(inst.ID).diskFree(st.Host.DiskFree) // what is free, not the disk's size (hosts_seen.go)
	for _, j := range s.store.Jobs().ByInstance(inst.ID) {
		if !activeJob(j.Status) {
			continue
		}
		js, err := s.jobSpec(j)
		if err != nil {
			return api.Instance{}, err // its free capacity is unknown
		}
		out.Free.GPUs -= float64(js.Request.GPU) / 1000
		out.Free.CPUs -= float64(js.Request.CPU) / 1000
		out.Free.Memory -= api.Size(js.Request.Memory)
	}
	if l := s.agents.get(inst.ID); l != nil {
		out.LastHeartbeat = l.last()
	}
	return out, nil
}

func (s *fleetsAPI) handleListFleets(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	out := []api.Fleet{}
	for _, f := range s.store.Fleets().List() {
		if !visibleFleet(project, f) {
			continue
		}
		fo, err := s.fleetOut(project, f)
		if err != nil {
			s.log.Warn().Err(err).Str("fleet", f.ID).Msg("fleet left out of the listing")
			continue
		}
		out = append(out, fo)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// sharedFleetName reports whether name is a shared fleet's, or "local",
// which stays reserved for the local fleet even on a server without it.
func sharedFleetName(st *store.Store, name string) bool {
	if name == localFleet {
		return true
	}
	f, err := st.Fleets().Get(name)
	return err == nil && f.Project == ""
}

// findFleet resolves a fleet name as the project sees it. Project fleets
// cannot take a shared fleet's name (handleApplyFleet), so a name means one
// fleet; one made before that rule still resolves first, so it can be
// deleted.
func (s *fleetsAPI) findFleet(project, name string) (store.Record, error) {
	if f, err := s.store.Fleets().Get(project + "/" + name); err == nil {
		return f, nil
	}
	if f, err := s.store.Fleets().Get(name); err == nil && f.Project == "" {
		return f, nil
	}
	return store.Record{}, notFound("fleet", name)
}

// authorizedFleet is the preamble of the handlers whose path names a
// {project} and a {fleet}: it checks that the caller holds at least role in
// the path's project, then returns that project, the caller and the fleet
// the path names (see findFleet: it may be a shared fleet whose Project is
// ""), or the authorization or not-found error to send back.
func (s *fleetsAPI) authorizedFleet(r *http.Request, role string) (string, caller, store.Record, error) {
	project, c, err := s.authorize(r, role)
	if err != nil {
		return "", caller{}, store.Record{}, err
	}
	f, err := s.findFleet(project, r.PathValue("fleet"))
	return project, c, f, err
}

func (s *fleetsAPI) handleGetFleet(w http.ResponseWriter, r *http.Request) error {
	project, _, f, err := s.authorizedFleet(r, api.RoleUser)
	if err != nil {
		return err
	}
	fo, err := s.fleetOut(project, f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fo)
	return nil
}

func (s *fleetsAPI) handleApplyFleet(w http.ResponseWriter, r *http.Request) error {
	project, c, cfg, err := s.readApplyConfig(w, r, api.RoleManager)
	if err != nil {
		return err
	}
	if cfg.Fleet == nil {
		return badField("configuration.type", "%s is not a fleet; apply it with the matching endpoint", cfg.Kind)
	}
	if cfg.Fleet.Name == "" {
		return badField("configuration.name", "a fleet needs a name")
	}
	if sharedFleetName(s.store, cfg.Fleet.Name) {
		return badField("configuration.name", "%q is the name of a fleet shared by every project; a project fleet of that name would hide it in this project's paths: choose another name", cfg.Fleet.Name)
	}
	if err := s.checkBackendFleet(project, cfg.Fleet); err != nil {
		return err // a backend fleet names backends of its own project only
	}
	norm, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	rec := store.Record{Kind: store.KindFleet, ID: project + "/" + cfg.Fleet.Name, Project: project, Name: cfg.Fleet.Name, User: c.name,
		Status: "active", Spec: encodeSpec(configState{Config: norm})}
	if _, err := s.store.Apply(r.Context(), store.Put(rec), s.event(project, store.KindFleet, rec.ID, "applied", "applied by "+c.name)); err != nil {
		return err
	}
	s.hosts.applySSHFleet(rec.ID, project, cfg.Fleet)
	kick(s.schedWake) // a backend fleet's backends or nodes max may let runs in
	rec, err = s.store.Fleets().Get(rec.ID)
	if err != nil {
		return err
	}
	fo, err := s.fleetOut(project, rec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fo)
	return nil
}

func (s *fleetsAPI) handleDeleteFleet(w http.ResponseWriter, r *http.Request) error {
	project, c, f, err := s.authorizedFleet(r, api.RoleManager)
	if err != nil {
		return err
	}
	if f.Project == "" {
		return forbidden("fleet %q is shared by every project and cannot be deleted through a project", f.Name)
	}
	if _, ok := backendFleetOf(f); ok {
		// Its runs, running or waiting, would be left without capacity.
		if runs := s.runsUsingFleet(project, f.Name); len(runs) > 0 {
			return conflict("fleet %q is used by runs %s: stop them first", f.Name, strings.Join(runs, ", "))
		}
	}
	muts := []store.Mutation{store.Delete(store.KindFleet, f.ID), s.event(project, store.KindFleet, f.ID, "deleted", "deleted by "+c.name)}
	for _, inst := range s.store.Instances().ByFleet(f.ID) {
		// Only unfinished jobs keep a host (api_runs_delete.go).
		released, err := s.releaseFinishedJobs(f.Name, inst)
		if err != nil {
			return err
		}
		muts = append(append(muts, released...), store.Delete(store.KindInstance, inst.ID))
	}
	// Its registration tokens and hosts' keys go with it, in the same
	// commit: a token must never outlive the fleet it admits hosts to.
	tokens, err := s.hosts.fleetTokenMutations(r.Context(), f.ID)
	if err != nil {
		return err
	}
	if _, err := s.store.Apply(r.Context(), append(muts, tokens...)...); err != nil {
		return err
	}
	s.hosts.dropFleetTunnels(f.ID)
	s.hosts.deleteSSHFleet(r.Context(), f.ID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *fleetsAPI) handleListInstances(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	out := []api.Instance{}
	for _, f := range s.store.Fleets().List() {
		if !visibleFleet(project, f) {
			continue
		}
		for _, inst := range s.store.Instances().ByFleet(f.ID) {
			io, err := s.instanceOut(inst)
			if err != nil {
				continue // logged once by the spec cache
			}
			out = append(out, io)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *fleetsAPI) handleOffers(w http.ResponseWriter, r *http.Request) error {
	project, _, err := s.authorize(r, api.RoleUser)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	var res api.Resources
	if v := q.Get("gpu"); v != "" {
		if res.GPU, err = api.ParseGPU(v); err != nil {
			return badField("gpu", "%v", err)
		}
	}
	if v := q.Get("cpu"); v != "" {
		if res.CPU, err = api.ParseCPU(v); err != nil {
			return badField("cpu", "%v", err)
		}
	}
	if v := q.Get("memory"); v != "" {
		if res.Memory, err = api.ParseRange(v, api.ParseSize); err != nil {
			return badField("memory", "%v", err)
		}
	}
	writeJSON(w, http.StatusOK, s.offers(project, requestOf(res)))
	return nil
}

// offers lists the idle capacity of the project's visible hosts that fits
// one job of req, most free GPUs first.
func (s *fleetsAPI) offers(project string, req taskRequest) []api.Offer {
	out := []api.Offer{}
	for _, f := range s.store.Fleets().List() {
		if !visibleFleet(project, f) {
			continue
		}
		for _, inst := range s.store.Instances().ByFleet(f.ID) {
			if s.agents.get(inst.ID) == nil {
				continue
			}
			io, err := s.instanceOut(inst)
			if err != nil {
				continue // not offered: its free capacity is unknown (logged once)
			}
			free := io.Free
			if free.GPUs*1000 < float64(req.GPU) || free.CPUs*1000 < float64(req.CPU) || int64(free.Memory) < req.Memory {
				continue
			}
			if req.GPUName != "" && !gpuNameMatches(free.GPUName, req.GPUName) {
				continue
			}
			out = append(out, api.Offer{Backend: io.Backend, Fleet: f.Name, Instance: inst.Name, Resources: free, Available: "idle", Owned: true})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Resources.GPUs > out[j].Resources.GPUs })
	// Then the backends' offers, cheapest first (own hosts cost nothing).
	return append(out, s.backendOffers(project, req)...)
}
