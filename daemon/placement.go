package daemon

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/sched"
	"gpud.dev/gpud/store"
)

// This file holds where a run may be placed beyond its project and the
// targets of its fields: the fleets, instances and backends it names
// (runPlacement, on the run) and the host facts its resources ask for
// that the scheduler's device matching does not see (hostNeeds, on each
// job): CPU architecture, GPU vendor, compute capability, free disk.
// Both are evaluated against what hosts report once per distinct
// constraint per scheduling cycle (placer), and handed to sched as a
// node selector on a label the matching nodes carry.

// runPlacement is what a run's placement fields keep: the fleets (names
// as the project sees them), instances and backends it may use; empty
// lists mean any.
type runPlacement struct {
	Fleets    []string          `json:"fleets,omitempty"`
	Instances []api.InstanceRef `json:"instances,omitempty"`
	// Backends are instance backends (local, ssh, registration, remote)
	// and job backends' types or names.
	Backends []string `json:"backends,omitempty"`
}

func (p runPlacement) isZero() bool {
	return len(p.Fleets) == 0 && len(p.Instances) == 0 && len(p.Backends) == 0
}

// placementOf reads a run's placement fields. Backends other than gpud's
// hosts' are kept by name (lower case): a job backend's type or name
// selects its capacity; the plan refuses a list of only unknown ones, and
// notes the ones no host or backend has in a mixed list.
func placementOf(spec *api.RunSpec) runPlacement {
	p := runPlacement{Fleets: slices.Clone(spec.Fleets), Instances: slices.Clone(spec.Instances)}
	for _, b := range spec.Backends {
		ibs := instanceBackends(b)
		if ibs == nil {
			// A job backend's type or name (backend_capacity.go); the plan
			// refuses a name no configured backend has (checkBackends).
			ibs = []string{strings.ToLower(b)}
		}
		for _, ib := range ibs {
			if !slices.Contains(p.Backends, ib) {
				p.Backends = append(p.Backends, ib)
			}
		}
	}
	return p
}

// instanceBackends maps a backend as a configuration names it to the
// instance backends of gpud's hosts: its own names, and dstack's
// "remote" for SSH fleets (which also names gpud's heartbeat-only hosts).
// nil: no host of gpud has that backend (a cloud, or an unknown name).
func instanceBackends(name string) []string {
	switch strings.ToLower(name) {
	case "local":
		return []string{"local"}
	case "ssh":
		return []string{"ssh"}
	case "remote":
		return []string{"ssh", "remote"}
	case "registration", "registered":
		return []string{"registration"}
	}
	return nil
}

// hostNeeds are the facts of a host one job's resources ask for beyond
// CPU, memory and devices; zero values ask for nothing.
type hostNeeds struct {
	Arch string `json:"arch,omitempty"` // GOARCH: amd64, arm64
	// Vendor is the accelerator vendor every device of the host must
	// have (hosts report nvidia, amd, tenstorrent, tpu).
	Vendor string `json:"vendor,omitempty"`
	// ComputeCapability is the minimum every device must report.
	ComputeCapability string `json:"compute_capability,omitempty"`
	DiskMin           int64  `json:"disk_min,omitempty"` // free disk, bytes
	// Privileged needs a host whose admin allows privileged jobs.
	Privileged bool `json:"privileged,omitempty"`
	// Python is the run's python version: a host that runs the job as a
	// process must have that interpreter. Image says whether the job has
	// an image (its own or the server's default), which a mixed host
	// runs in Docker.
	Python string `json:"python,omitempty"`
	Image  bool   `json:"image,omitempty"`
	// Volumes are the host paths (one a line) of the job's instance
	// volumes that are not optional: the host's admin must allow each.
	// Remap: a volume is mounted elsewhere than its host path, which only
	// a container can (Image says whether the job has one).
	Volumes string `json:"volumes,omitempty"`
	Remap   bool   `json:"remap,omitempty"`
	// Hosts and Backends (one a line) keep a job on the host its managed
	// volume VolumeName lives on, or, before it lives anywhere, on hosts
	// of its backend; set per cycle (volumeHostNeeds), never stored.
	Hosts      string `json:"-"`
	Backends   string `json:"-"`
	VolumeName string `json:"-"`
	// VolumeBackend keeps a job on the project's job backend of that
	// name, which holds its volume VolumeName (a Kubernetes claim):
	// no host matches it (volumes_backend.go).
	VolumeBackend string `json:"-"`
}

// needsOf reads a job's host needs from its resources. The disk is
// matched only when the configuration sets it: dstack's default (100GB..)
// would keep every smaller host idle.
func needsOf(res api.Resources) hostNeeds {
	var n hostNeeds
	switch res.CPU.Arch {
	case "x86":
		n.Arch = "amd64"
	case "arm":
		n.Arch = "arm64"
	}
	switch res.GPU.Vendor {
	case api.VendorTT:
		n.Vendor = "tenstorrent"
	default:
		n.Vendor = res.GPU.Vendor
	}
	n.ComputeCapability = res.GPU.ComputeCapability
	def := api.Defaults(api.KindTask).Run().Resources.Disk.Size
	if d := res.Disk.Size; d.Min != nil && !(d.Max == nil && def.Max == nil && def.Min != nil && *d.Min == *def.Min) {
		n.DiskMin = int64(*d.Min)
	}
	return n
}

// gpuMatch is the device part of a GPU request as sched matches it: the
// models (any of them, comma-separated) and the range of device memory.
// total_memory, over the count.min devices gpud places, narrows that
// range: devices of one model have one size.
func gpuMatch(g api.GPUSpec) (names string, memMin, memMax int64) {
	names = strings.Join(g.Names, ",")
	if g.Memory.Min != nil {
		memMin = int64(*g.Memory.Min)
	}
	if g.Memory.Max != nil {
		memMax = int64(*g.Memory.Max)
	}
	count := int64(1)
	if !g.Fractional() && g.Count.Min != nil {
		count = int64(*g.Count.Min)
	}
	if count > 0 {
		if t := g.TotalMemory.Min; t != nil {
			memMin = max(memMin, (int64(*t)+count-1)/count)
		}
		if t := g.TotalMemory.Max; t != nil {
			if m := int64(*t) / count; memMax == 0 || m < memMax {
				memMax = max(m, 1)
			}
		}
	}
	return names, memMin, memMax
}

// gpuModels is gpuModel of each of comma-separated names.
func gpuModels(names string) string {
	if !strings.Contains(names, ",") {
		return gpuModel(names)
	}
	parts := strings.Split(names, ",")
	for i, n := range parts {
		parts[i] = gpuModel(n)
	}
	return strings.Join(parts, ",")
}

// gpuNameMatches reports whether a host's model is one of the requested
// comma-separated names.
func gpuNameMatches(model, names string) bool {
	for _, n := range strings.Split(names, ",") {
		if strings.EqualFold(gpuModel(n), model) {
			return true
		}
	}
	return false
}

// placeHost is one host as placement sees it.
type placeHost struct {
	id, name, fleetID, fleetName, fleetProject, backend string
	info                                                api.HostInfo
}

// placeHostOf reads an instance and its fleet; ok is false when either
// is corrupt or gone.
func (s *Server) placeHostOf(inst store.Record) (placeHost, bool) {
	st, err := s.instanceSpec(inst)
	if err != nil {
		return placeHost{}, false
	}
	f, err := s.store.Fleets().Get(inst.Fleet)
	if err != nil {
		return placeHost{}, false
	}
	return placeHost{id: inst.ID, name: inst.Name, fleetID: f.ID, fleetName: f.Name, fleetProject: f.Project,
		backend: st.Backend, info: st.Host}, true
}

// instanceNumbers numbers the hosts of each fleet, read once per use: a
// host's number is its place, from 0, in the fleet's instance listing (by
// id, as `gpud fleet` lists them).
type instanceNumbers struct {
	s     *Server
	fleet map[string]map[string]int
}

func (n *instanceNumbers) of(h placeHost) int {
	if n.fleet == nil {
		n.fleet = map[string]map[string]int{}
	}
	m, ok := n.fleet[h.fleetID]
	if !ok {
		m = map[string]int{}
		for i, inst := range n.s.store.Instances().ByFleet(h.fleetID) {
			m[inst.ID] = i
		}
		n.fleet[h.fleetID] = m
	}
	if i, ok := m[h.id]; ok {
		return i
	}
	return -1
}

// refMatches reports whether h is the instance ref names: every part the
// ref sets must match.
func refMatches(ref api.InstanceRef, h placeHost, nums *instanceNumbers) bool {
	if ref.Name != "" && ref.Name != h.name && ref.Name != h.id {
		return false
	}
	if ref.Hostname != "" && !strings.EqualFold(ref.Hostname, h.info.Hostname) {
		return false
	}
	if ref.Fleet != "" && ref.Fleet != h.fleetName {
		return false
	}
	if ref.Instance != nil && nums.of(h) != *ref.Instance {
		return false
	}
	return true
}

// placementMatches reports whether h may take a job of project with
// placement p.
func placementMatches(h placeHost, project string, p runPlacement, nums *instanceNumbers) bool {
	if h.fleetProject != "" && h.fleetProject != project {
		return false
	}
	if len(p.Fleets) > 0 && !slices.Contains(p.Fleets, h.fleetName) {
		return false
	}
	if len(p.Backends) > 0 && !slices.Contains(p.Backends, h.backend) {
		return false
	}
	if len(p.Instances) > 0 && !slices.ContainsFunc(p.Instances, func(r api.InstanceRef) bool { return refMatches(r, h, nums) }) {
		return false
	}
	return true
}

// needsMatch reports whether host info meets n.
func needsMatch(info api.HostInfo, n hostNeeds) bool {
	if n.Arch != "" && info.Arch != n.Arch {
		return false
	}
	for _, d := range info.Accelerators.Devices {
		if n.Vendor != "" && !strings.EqualFold(d.Vendor, n.Vendor) {
			return false
		}
		if n.ComputeCapability != "" && (d.ComputeCapability == "" || compareCC(d.ComputeCapability, n.ComputeCapability) < 0) {
			return false
		}
	}
	if n.DiskMin > 0 && int64(info.DiskFree) < n.DiskMin {
		return false
	}
	if n.Privileged && !info.AllowPrivileged {
		return false
	}
	if n.Python != "" && runtimeOf(info.Runtime, n.Image) == targetProcess && !slices.Contains(info.Pythons, n.Python) {
		return false
	}
	return volumesMatch(info, n)
}

// compareCC compares compute capabilities "major.minor" numerically.
func compareCC(a, b string) int {
	am, an := splitCC(a)
	bm, bn := splitCC(b)
	if am != bm {
		return am - bm
	}
	return an - bn
}

func splitCC(s string) (int, int) {
	maj, mnr, _ := strings.Cut(strings.TrimSpace(s), ".")
	a, _ := strconv.Atoi(maj)
	b, _ := strconv.Atoi(mnr)
	return a, b
}

// describe says in a few words what a placement and needs select, for a
// pending job's reason: `fleet "lab" and cpu arch arm64`.
func describe(p runPlacement, needs []hostNeeds) string {
	var parts []string
	if len(p.Fleets) > 0 {
		parts = append(parts, "fleet "+strings.Join(quoteAll(p.Fleets), " or "))
	}
	if len(p.Instances) > 0 {
		var refs []string
		for _, r := range p.Instances {
			refs = append(refs, refText(r))
		}
		parts = append(parts, "instance "+strings.Join(refs, " or "))
	}
	if len(p.Backends) > 0 {
		parts = append(parts, "backend "+strings.Join(quoteAll(p.Backends), " or "))
	}
	for _, n := range needs {
		if n.Arch != "" {
			parts = append(parts, "cpu arch "+n.Arch)
		}
		if n.Vendor != "" {
			parts = append(parts, "only "+n.Vendor+" GPUs")
		}
		if n.ComputeCapability != "" {
			parts = append(parts, "GPUs of compute capability "+n.ComputeCapability+" or more")
		}
		if n.DiskMin > 0 {
			parts = append(parts, api.Size(n.DiskMin).String()+" of free disk")
		}
		if n.Privileged {
			parts = append(parts, "an admin who allows privileged jobs")
		}
		if n.Python != "" {
			parts = append(parts, "python"+n.Python+" where jobs run as processes")
		}
		if n.Volumes != "" {
			parts = append(parts, "an admin who allows volumes at "+strings.ReplaceAll(n.Volumes, "\n", ", "))
		}
		if n.Remap {
			parts = append(parts, "Docker, to mount a volume elsewhere than its host path")
		}
		if d := describeVolume(n); d != "" {
			parts = append(parts, d)
		}
	}
	return strings.Join(parts, " and ")
}

func quoteAll(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strconv.Quote(v)
	}
	return out
}

// refText shows an instance ref as a configuration writes it.
func refText(r api.InstanceRef) string {
	var parts []string
	if r.Name != "" {
		parts = append(parts, "name "+strconv.Quote(r.Name))
	}
	if r.Hostname != "" {
		parts = append(parts, "hostname "+strconv.Quote(r.Hostname))
	}
	if r.Fleet != "" {
		parts = append(parts, "fleet "+strconv.Quote(r.Fleet))
	}
	if r.Instance != nil {
		parts = append(parts, "number "+strconv.Itoa(*r.Instance))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// placer evaluates placements against a cycle's nodes: each distinct
// (project, placement, needs) is evaluated once over the hosts, its
// matching nodes get a label of their own, and every job with that
// constraint selects the label. A cycle costs O(constraints × hosts),
// not O(runs × hosts).
type placer struct {
	s      *Server
	nodes  []sched.Node
	hosts  []placeHost // by node, built on first use
	ok     []bool      // whether hosts[i] was read
	nums   instanceNumbers
	labels map[string]sched.NodeSelector
}

func newPlacer(s *Server, nodes []sched.Node) *placer {
	return &placer{s: s, nodes: nodes, nums: instanceNumbers{s: s}}
}

// placementLabel prefixes the per-cycle labels the placer sets.
const placementLabel = "gpud.placement/"

// selector returns the node selector of a job of project with placement
// p and the needs of its tasks; ok is false when they ask for nothing.
func (pl *placer) selector(project string, p runPlacement, needs []hostNeeds) (sched.NodeSelector, bool) {
	var own []hostNeeds
	for _, n := range needs {
		if n != (hostNeeds{}) && !slices.Contains(own, n) {
			own = append(own, n)
		}
	}
	if p.isZero() && len(own) == 0 {
		return sched.NodeSelector{}, false
	}
	key := constraintKey(project, p, own)
	if sel, ok := pl.labels[key]; ok {
		return sel, true
	}
	if pl.hosts == nil {
		pl.hosts, pl.ok = make([]placeHost, len(pl.nodes)), make([]bool, len(pl.nodes))
		for i, n := range pl.nodes {
			inst, err := pl.s.store.Instances().Get(n.Name)
			if err != nil {
				continue
			}
			pl.hosts[i], pl.ok[i] = pl.s.placeHostOf(inst)
		}
	}
	if pl.labels == nil {
		pl.labels = map[string]sched.NodeSelector{}
	}
	label := placementLabel + strconv.Itoa(len(pl.labels))
	for i := range pl.nodes {
		h := pl.hosts[i]
		if !pl.ok[i] && backendNodeMatches(pl.nodes[i], project, p, own) {
			pl.nodes[i].Labels[label] = "yes" // a job backend's capacity (backend_capacity.go)
		}
		if !pl.ok[i] || !placementMatches(h, project, p, &pl.nums) {
			continue
		}
		if !slices.ContainsFunc(own, func(n hostNeeds) bool { return !needsMatch(h.info, n) || !hostsMatch(h, n) }) {
			pl.nodes[i].Labels[label] = "yes"
		}
	}
	sel := sched.NodeSelector{Key: label, Values: []string{"yes"}, Name: describe(p, own)}
	pl.labels[key] = sel
	return sel, true
}

func constraintKey(project string, p runPlacement, needs []hostNeeds) string {
	var b strings.Builder
	b.WriteString(project)
	b.WriteString("\x00" + strings.Join(p.Fleets, "\x01"))
	b.WriteString("\x00" + strings.Join(p.Backends, "\x01"))
	for _, r := range p.Instances {
		inst := -1
		if r.Instance != nil {
			inst = *r.Instance
		}
		fmt.Fprintf(&b, "\x00%s\x01%s\x01%s\x01%d", r.Name, r.Hostname, r.Fleet, inst)
	}
	for _, n := range needs {
		fmt.Fprintf(&b, "\x02%+v", n) // every need: two constraints differing in one must not share a label
	}
	return b.String()
}

// groupNeeds lists the host needs of a gang's jobs.
func groupNeeds(specs map[string]jobRecordSpec, g []store.Record) []hostNeeds {
	var out []hostNeeds
	for _, j := range g {
		if n := specs[j.ID].Request.Needs; n != (hostNeeds{}) {
			out = append(out, n)
		}
	}
	return out
}

// placedOffers keeps the offers a run's placement and its first job's
// host needs and device memory range allow, so a plan never offers a host
// the scheduler would not use.
func (s *Server) placedOffers(project string, run store.Record, req taskRequest, offers []api.Offer) ([]api.Offer, error) {
	rs, err := runSpecOf(run)
	if err != nil {
		return nil, err
	}
	nums := &instanceNumbers{s: s}
	out := offers[:0]
	for _, o := range offers {
		if o.Fleet == "" { // a job backend's offer: through which fleet, if any (fleet_backend_plan.go)
			if fleet, ok := s.placedBackendOffer(project, rs, req, o); ok {
				o.Fleet = fleet
				out = append(out, o)
			}
			continue
		}
		inst, err := s.store.Instances().Get(o.Instance)
		if err != nil {
			continue
		}
		h, ok := s.placeHostOf(inst)
		if !ok || !placementMatches(h, project, rs.Place, nums) || !needsMatch(h.info, req.Needs) {
			continue
		}
		if m := int64(o.Resources.GPUMemory); req.GPU > 0 && (m < req.GPUMemory || req.GPUMemoryMax > 0 && m > req.GPUMemoryMax) {
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

// tagLabelPrefix prefixes the container labels that carry a run's tags.
const tagLabelPrefix = "dev.gpud.tag."

// addTagLabels copies a run's tags onto its job's labels: the container
// is the resource gpud creates for a run, as dstack tags the instances it
// creates.
func addTagLabels(labels, tags map[string]string) {
	for k, v := range tags {
		labels[tagLabelPrefix+k] = v
	}
}
