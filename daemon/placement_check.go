package daemon

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/store"
)

// The plan-time side of placement (fields_rules_placement.go): references
// to fleets and instances that do not exist, backends gpud has none of and
// values no host can meet are refused; what gpud does differently from a
// dstack server is noted.

// fleetNames lists the fleets a project's runs may use: its own and the
// shared ones.
func (s *Server) fleetNames(project string) []string {
	var out []string
	for _, f := range s.store.Fleets().List() {
		if visibleFleet(project, f) {
			out = append(out, f.Name)
		}
	}
	slices.Sort(out)
	return out
}

func checkFleets(fc *fieldCheck, path string) *refusal {
	if path != "fleets" {
		return nil
	}
	have := fc.srv.fleetNames(fc.project)
	var missing []string
	for _, name := range fc.run.Fleets {
		if !slices.Contains(have, name) {
			missing = append(missing, strconv.Quote(name))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &refusal{
		Why: fmt.Sprintf(plural(len(missing), "fleet %s is no fleet of project %q nor a shared one; its runs can use %s",
			"fleets %s are no fleets of project %q nor shared ones; its runs can use %s"),
			strings.Join(missing, ", "), fc.project, listOr(quoteAll(have), "no fleet")),
		Instead: "name fleets that exist, or apply a `type: fleet` configuration with that name first",
	}
}

// projectHosts lists the instances of the fleets a project's runs may use
// (connected or not: a host that is down now may be back), for the plan.
func (s *Server) projectHosts(project string) []placeHost {
	var out []placeHost
	for _, inst := range s.store.Instances().List() {
		if inst.Status == store.InstanceTerminated || inst.Status == store.InstanceTerminating {
			continue
		}
		h, ok := s.placeHostOf(inst)
		if ok && (h.fleetProject == "" || h.fleetProject == project) {
			out = append(out, h)
		}
	}
	return out
}

func checkInstances(fc *fieldCheck, path string) *refusal {
	if path != "instances" {
		return nil
	}
	hosts := fc.srv.projectHosts(fc.project)
	nums := &instanceNumbers{s: fc.srv}
	var missing []string
	for _, ref := range fc.run.Instances {
		if !slices.ContainsFunc(hosts, func(h placeHost) bool { return refMatches(ref, h, nums) }) {
			missing = append(missing, refText(ref))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var have []string
	for _, h := range hosts {
		have = append(have, fmt.Sprintf("%s (hostname %q, fleet %q, number %d)", h.name, h.info.Hostname, h.fleetName, nums.of(h)))
	}
	return &refusal{
		Why: fmt.Sprintf("no host of project %q matches %s; its hosts are %s", fc.project, strings.Join(missing, ", "),
			listOr(have, "none")),
		Instead: "name an instance by name, hostname, or fleet and number (as `gpud fleet` lists them), or drop instances",
	}
}

func checkBackends(fc *fieldCheck, path string) *refusal {
	if path != "backends" {
		return nil
	}
	if slices.ContainsFunc(fc.run.Backends, fc.knownBackend) {
		return nil
	}
	return &refusal{
		Why: fmt.Sprintf("no %s backend is configured in project %q: gpud runs on its SSH and registered hosts and on the project's job backend plugins (gpud backend list)",
			strings.Join(fc.run.Backends, " or "), fc.project),
		Instead: "add the backend with gpud backend add, drop backends to use the project's fleets, or name gpud's own: local, ssh (dstack's remote), registration",
	}
}

// knownBackend reports whether b names gpud's own hosts' backends or a
// job backend of the project (its type or name).
func (fc *fieldCheck) knownBackend(b string) bool {
	return instanceBackends(b) != nil || (fc.srv != nil && slices.Contains(fc.srv.jobBackendTypes(fc.project), strings.ToLower(b)))
}

// noteBackends names the backends a mixed list names that gpud has none of.
func noteBackends(fc *fieldCheck) string {
	var unknown, known []string
	for _, b := range fc.run.Backends {
		if fc.knownBackend(b) {
			known = append(known, b)
		} else {
			unknown = append(unknown, b)
		}
	}
	if len(unknown) == 0 || len(known) == 0 {
		return ""
	}
	return fmt.Sprintf("backends: no %s backend is configured; the run uses only %s hosts", strings.Join(unknown, " or "), strings.Join(known, ", "))
}

func checkSpot(fc *fieldCheck, path string) *refusal {
	if fc.run.SpotPolicy != api.SpotPolicySpot {
		return nil
	}
	return &refusal{
		Why:     "gpud's hosts are owned, on-demand hosts: none is a spot instance, and no cloud backend is configured to create one",
		Instead: "use spot_policy: on-demand or auto",
	}
}

func checkMaxPrice(fc *fieldCheck, path string) *refusal {
	if fc.run.MaxPrice >= 0 {
		return nil
	}
	return &refusal{Why: "a price cannot be below zero", Instead: "give max_price in dollars per hour, like 2.5"}
}

func noteMaxPrice(fc *fieldCheck) string {
	return fmt.Sprintf("max_price: gpud's hosts are owned and cost nothing per hour, so every host meets max_price %g", fc.run.MaxPrice)
}

func noteIdleDuration(*fieldCheck) string {
	return "idle_duration: gpud creates no instances for a run, so none idles or is terminated for it; " +
		"the run's host stays in its fleet (as a dstack server does with SSH fleet hosts)"
}

// placementNotes are the plan's notes that no set field triggers: a field
// written with dstack's default value, which SetFields does not list.
func placementNotes(cfg *api.Config) []string {
	run := cfg.Run()
	if run == nil {
		return nil
	}
	var out []string
	if run.CreationPolicy == api.CreationPolicyReuseOrCreate && cfg.At("creation_policy", "", "").Line > 0 {
		out = append(out, "creation_policy: gpud creates no instances: the run waits for a host of the project's fleets")
	}
	return out
}

// resourcesAt is the resources a field path is under: a task group's or
// replica group's own, else the run's.
func resourcesAt(fc *fieldCheck, path string) api.Resources {
	i := groupIndex(path, "groups[")
	if t := fc.cfg.Task; t != nil && i >= 0 && i < len(t.Groups) && t.Groups[i].Resources != nil {
		return *t.Groups[i].Resources
	}
	i = groupIndex(path, "replicas[")
	if sv := fc.cfg.Service; sv != nil && i >= 0 && i < len(sv.Replicas.Groups) && sv.Replicas.Groups[i].Resources != nil {
		return *sv.Replicas.Groups[i].Resources
	}
	return fc.run.Resources
}

func groupIndex(path, prefix string) int {
	rest, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return -1
	}
	n, _, _ := strings.Cut(rest, "]")
	i, err := strconv.Atoi(n)
	if err != nil {
		return -1
	}
	return i
}

func checkVendor(fc *fieldCheck, path string) *refusal {
	if v := resourcesAt(fc, path).GPU.Vendor; v == api.VendorIntel {
		return &refusal{
			Why:     "no gpud host reports Intel accelerators: the agent detects NVIDIA, AMD, Tenstorrent and TPU devices",
			Instead: "name one of nvidia, amd, tt, tpu, or drop the vendor",
		}
	}
	return nil
}

func checkTotalMemory(fc *fieldCheck, path string) *refusal {
	g := resourcesAt(fc, path).GPU
	if g.Fractional() || g.Count.Min == nil || *g.Count.Min > 0 {
		return nil
	}
	return &refusal{
		Why:     "the GPU count may be 0, and gpud places the minimum count: no device would hold the total",
		Instead: "set a GPU count of at least 1, like gpu: 2..8, or use memory per device",
	}
}

func checkComputeCapability(fc *fieldCheck, path string) *refusal {
	if v := resourcesAt(fc, path).GPU.Vendor; v != "" && v != api.VendorNVIDIA {
		return &refusal{
			Why:     "only NVIDIA devices report a compute capability, and the run asks for " + v,
			Instead: "drop compute_capability, or ask for nvidia",
		}
	}
	return nil
}

func noteDisk(fc *fieldCheck) string {
	d := fc.run.Resources.Disk.Size
	if d.Max == nil || d.Min == nil {
		return ""
	}
	return fmt.Sprintf("resources.disk: a job uses its host's own disk: gpud places it on a host with at least %s free and does not cap it at %s",
		api.Size(*d.Min), api.Size(*d.Max))
}

// plural is one for n == 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// listOr joins vs with commas, or says none.
func listOr(vs []string, none string) string {
	if len(vs) == 0 {
		return none
	}
	return strings.Join(vs, ", ")
}
