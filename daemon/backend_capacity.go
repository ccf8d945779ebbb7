package daemon

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/sched"
	"gpud.dev/gpud/store"
)

// Job backends as capacity (issue 17, docs/backends.md "How runs use a
// backend"): each offer of a project's job backend (Info.Jobs: Kubernetes,
// Slurm) is one node of gpud's scheduler, named backend:PROJECT/NAME/KEY,
// so queues, quotas, fair share and gangs judge it like a host: gpud's
// scheduler decides when a job runs and holds its request on the node it
// was admitted to; the backend's engine decides where (pods are never
// pinned to the engine's nodes). The nodes are refreshed from Offers on a
// slow timer and whenever the set of backends changes; a backend whose
// Offers fails keeps its last nodes, and a node that still holds jobs is
// kept when its offer goes away, so a running job's accounting stays.

const (
	// backendNodePrefix starts the name of every backend capacity node.
	backendNodePrefix = "backend:"
	// jobBackendLabel is the backend label's value on backend capacity
	// (hosts carry local, ssh, registration or remote): the field rules'
	// target "backend" selects it.
	jobBackendLabel = "job-backend"
	// backendTypeLabel and backendNameLabel carry the backend's type
	// (kubernetes, slurm, test) and name; hosts have neither.
	backendTypeLabel = "backend-type"
	backendNameLabel = "backend-name"
	// backendOffersEvery is the slow refresh of backend offers.
	backendOffersEvery = 30 * time.Second
)

// backendCapacity is the last known capacity of every job backend.
type backendCapacity struct {
	mu sync.Mutex
	// nodes holds each backend's nodes, by backend record id.
	nodes map[string][]sched.Node
	// seen is the set of backends the nodes were built from (their ids,
	// plugin supervisors and processes): a change refreshes at once.
	seen string
}

func backendNodeName(project, name, key string) string {
	return backendNodePrefix + project + "/" + name + "/" + key
}

// backendOfNode reports the project and backend name of a backend
// capacity node (ok false for a host).
func backendOfNode(node string) (project, name string, ok bool) {
	rest, ok := strings.CutPrefix(node, backendNodePrefix)
	if !ok {
		return "", "", false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// startJobBackends builds the first capacity (so a restarted server's
// running backend jobs keep their nodes from the first scheduling cycle)
// and starts the loop that keeps it current and follows backend jobs.
func (s *Server) startJobBackends() {
	s.refreshBackendCapacity(s.ctx, true)
	s.wg.Go(func() { s.jobBackendLoop(s.ctx) })
	s.startFleetAutoscaler() // backend fleets on instance backends (fleet_autoscale.go)
}

// jobBackendLoop refreshes the backends' capacity (every
// backendOffersEvery, and within a second of a backend being added,
// deleted or restarted) and makes sure every started backend job is
// followed (after a server restart, or a lost poller).
func (s *Server) jobBackendLoop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		full := time.Since(last) >= backendOffersEvery
		if s.refreshBackendCapacity(ctx, full) && full {
			last = time.Now()
		}
		s.dispatcher.followBackendJobs()
	}
}

// backendsFingerprint names the running backends, to notice a change.
func (s *Server) backendsFingerprint() (string, map[string]*backendEntry) {
	entries := map[string]*backendEntry{}
	if s.backends == nil {
		return "", entries
	}
	s.backends.mu.Lock()
	for id, e := range s.backends.entries {
		if e.sup != nil {
			entries[id] = e
		}
	}
	s.backends.mu.Unlock()
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(entries)) {
		// A restarted plugin (another pid) is asked again too.
		fmt.Fprintf(&b, "%s=%p/%d;", id, entries[id].sup, entries[id].sup.State().Pid)
	}
	return b.String(), entries
}

// refreshBackendCapacity asks every job backend for its offers when full
// is set or the set of backends changed; it reports whether it asked, and
// wakes the scheduler when the capacity changed.
func (s *Server) refreshBackendCapacity(ctx context.Context, full bool) bool {
	if s.backends == nil {
		return false
	}
	fp, entries := s.backendsFingerprint()
	c := &s.backends.capacity
	c.mu.Lock()
	changed := fp != c.seen
	c.mu.Unlock()
	if !full && !changed {
		return false
	}
	fresh := map[string][]sched.Node{}
	ok := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, e := range entries {
		wg.Go(func() {
			nodes, err := s.backendNodes(ctx, e)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn().Err(err).Str("project", e.project).Str("backend", e.name).Msg("backend offers: keeping its last capacity")
				}
				return
			}
			mu.Lock()
			fresh[id], ok[id] = nodes, true
			mu.Unlock()
		})
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes == nil {
		c.nodes = map[string][]sched.Node{}
	}
	before := fmt.Sprint(c.nodes)
	for id := range c.nodes {
		if entries[id] == nil {
			delete(c.nodes, id) // deleted: its jobs fail (backend_dispatch.go)
		}
	}
	for id, nodes := range fresh {
		// A node that still holds jobs stays, as it was, until they end.
		for _, old := range c.nodes[id] {
			if !slices.ContainsFunc(nodes, func(n sched.Node) bool { return n.Name == old.Name }) && s.nodeHoldsJobs(old.Name) {
				nodes = append(nodes, old)
			}
		}
		c.nodes[id] = nodes
	}
	c.seen = fp
	if fmt.Sprint(c.nodes) != before {
		kick(s.schedWake)
	}
	return true
}

// nodeHoldsJobs reports whether an active job is bound to node.
func (s *Server) nodeHoldsJobs(node string) bool {
	return slices.ContainsFunc(s.store.Jobs().ByInstance(node), func(j store.Record) bool { return activeJob(j.Status) })
}

// backendNodes turns one backend's offers into nodes; an instance backend
// (a cloud) has none: its machines join fleets as hosts.
func (s *Server) backendNodes(ctx context.Context, e *backendEntry) ([]sched.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := e.sup.Info(ctx)
	if err != nil {
		return nil, err
	}
	if !info.Jobs {
		return nil, nil
	}
	offers, err := e.sup.Offers(ctx, plugins.OfferQuery{})
	if err != nil {
		return nil, err
	}
	var out []sched.Node
	keys := map[string]int{}
	for _, o := range offers {
		keys[offerKey(o)]++
	}
	for i, o := range offers {
		if strings.Contains(strings.ToLower(o.Available), "unavailable") || strings.Contains(strings.ToLower(o.Available), "not") {
			continue
		}
		key := offerKey(o)
		if keys[key] > 1 {
			key = fmt.Sprintf("%s-%d", key, i)
		}
		r := o.Resources
		n := sched.Node{Name: backendNodeName(e.project, e.name, key), CPU: int64(r.CPUs * 1000), Memory: int64(r.Memory),
			Labels: map[string]string{
				// A multi-node gang stays within one backend (its engine's
				// network); the fleet topology level is the backend.
				"fleet": backendNodePrefix + e.project + "/" + e.name, projectLabel: e.project,
				runtimeLabel: "docker", backendLabel: jobBackendLabel, backendTypeLabel: strings.ToLower(info.Type), backendNameLabel: e.name,
			}}
		featureLabels(n.Labels, info)
		labelPrice(&n, o.Price, r.GPUs)
		for d := range int(r.GPUs) {
			n.Devices = append(n.Devices, sched.Device{Index: d, Name: gpuModel(r.GPUName), Memory: int64(r.GPUMemory)})
		}
		s.addBackHeld(&n, r)
		out = append(out, n)
	}
	return out, nil
}

// addBackHeld adds to node n what gpud's started jobs bound to it hold:
// an offer is what the backend can give now, and its engine already counts
// the workloads of those jobs as used, while gpud's scheduler holds their
// requests on n itself. Offer plus held is then n's capacity, so the jobs
// are not counted twice. (The engine may have placed them on other
// machines than the offer's: the backend's total is right, a node's shape
// is an estimate.)
func (s *Server) addBackHeld(n *sched.Node, r api.InstanceResources) {
	for _, j := range s.store.Jobs().ByInstance(n.Name) {
		switch j.Status {
		case store.JobPulling, store.JobRunning, store.JobTerminating:
		default:
			continue // not started on the engine yet, or ended
		}
		js, err := s.jobSpec(j)
		if err != nil {
			continue // logged once by jobSpec
		}
		n.CPU += js.Request.CPU
		n.Memory += js.Request.Memory
		for range js.Devices {
			n.Devices = append(n.Devices, sched.Device{Index: len(n.Devices), Name: gpuModel(r.GPUName), Memory: int64(r.GPUMemory)})
		}
	}
}

// offerKey names an offer within its backend: its instance type and
// region, made safe for a node name.
func offerKey(o api.Offer) string {
	key := o.Instance
	if key == "" {
		key = fmt.Sprintf("%gx%s", o.Resources.GPUs, o.Resources.GPUName)
	}
	if o.Region != "" {
		key += "@" + o.Region
	}
	return strings.NewReplacer("/", "_", " ", "_").Replace(key)
}

// backendCapacityNodes returns copies of every job backend's nodes for
// one scheduling cycle (the placer writes labels into them).
func (s *Server) backendCapacityNodes() []sched.Node {
	if s.backends == nil {
		return nil
	}
	c := &s.backends.capacity
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []sched.Node
	for _, id := range slices.Sorted(maps.Keys(c.nodes)) {
		for _, n := range c.nodes[id] {
			n.Labels = maps.Clone(n.Labels)
			n.Devices = slices.Clone(n.Devices)
			out = append(out, n)
		}
	}
	s.labelBackendFleets(out) // the backend fleets that take each (fleet_backend.go)
	return out
}

// jobBackendTypes lists the types and names of project's job backends
// with capacity, lower case: what a run's backends field may name.
func (s *Server) jobBackendTypes(project string) []string {
	// A backend added a moment ago counts at once (asked only when the
	// set of backends changed).
	s.refreshBackendCapacity(s.ctx, false)
	var out []string
	for _, n := range s.backendCapacityNodes() {
		if n.Labels[projectLabel] != project {
			continue
		}
		for _, v := range []string{n.Labels[backendTypeLabel], strings.ToLower(n.Labels[backendNameLabel])} {
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	return out
}

// hostsOnly keeps a job off backend capacity: services and dev
// environments run on hosts (their ports, probes and SSH go through the
// agent), and so does a job its fields keep off it.
func hostsOnly(why string) sched.NodeSelector {
	return sched.NodeSelector{Key: backendTypeLabel, Values: []string{""}, Name: why}
}

// backendNodeMatches reports whether backend capacity node n may take a
// job of project with placement p and host needs: the run's backends may
// name the backend's type or name; fleets and instances name hosts; host
// facts a backend does not report (CPU architecture, compute capability,
// free disk, privileged jobs, instance volumes, gpud host volumes) keep
// the job off it, and a volume on another backend does too.
func backendNodeMatches(n sched.Node, project string, p runPlacement, needs []hostNeeds) bool {
	if n.Labels[backendLabel] != jobBackendLabel || n.Labels[projectLabel] != project {
		return false
	}
	// A run's fleets take a node of each backend fleet that takes it
	// (labelBackendFleets, fleet_backend.go).
	if len(p.Instances) > 0 || len(p.Fleets) > 0 && !slices.ContainsFunc(p.Fleets, func(f string) bool { return n.Labels[fleetNodeLabel(f)] == "yes" }) {
		return false
	}
	if len(p.Backends) > 0 && !slices.Contains(p.Backends, n.Labels[backendTypeLabel]) && !slices.Contains(p.Backends, strings.ToLower(n.Labels[backendNameLabel])) {
		return false
	}
	vendor := "nvidia"
	if len(n.Devices) > 0 && strings.HasPrefix(n.Devices[0].Name, "MI") {
		vendor = "amd" // Instinct MI300X...: offers name models, not vendors
	}
	for _, h := range needs {
		if h.Arch != "" || (h.Vendor != "" && !strings.EqualFold(h.Vendor, vendor)) || h.ComputeCapability != "" || h.DiskMin > 0 ||
			(h.Privileged && !nodeHasFeature(n, plugins.FeaturePrivileged)) || h.Volumes != "" || h.Remap || h.Hosts != "" || h.Backends != "" ||
			(h.VolumeBackend != "" && h.VolumeBackend != n.Labels[backendNameLabel]) {
			return false
		}
	}
	return true
}

// refuseHostOnlyOnBackend is the refusal, on the backend target, of a
// field that only gpud's agent on a host honours (what, on the host).
func refuseHostOnlyOnBackend(what, instead string) refusal {
	return refusal{Why: what + ", and a job backend's workloads (pods, batch jobs) have no gpud agent",
		Instead: "run on the project's hosts (fleets or instances), or " + instead}
}
