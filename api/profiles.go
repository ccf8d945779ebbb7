package api

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/goccy/go-yaml/ast"
)

// Profile is a named set of run defaults (dstack's profiles.yml): backends,
// regions, spot policy, max price, retry, durations, and gpud's queue,
// priority and preemptible. A field a run sets wins over its profile.
type Profile struct {
	Name    string
	Default bool
	File    string
	spec    RunSpec
	set     map[string]bool
}

// Profiles are the profiles found on disk, by name.
type Profiles struct {
	byName map[string]*Profile
	order  []string
}

// ProfileFiles lists where profiles are read from under dir, in precedence
// order: gpud's own file, then dstack's.
func ProfileFiles(dir string) []string {
	return []string{filepath.Join(dir, ".gpud", "profiles.yml"), filepath.Join(dir, ".dstack", "profiles.yml")}
}

// LoadProfiles reads the profile files of each dir (see ProfileFiles); a
// missing file is skipped. When two files define the same name, the one
// read first wins, so pass dirs in precedence order (the project, then the
// home directory). All errors of all files are returned at once.
func LoadProfiles(dirs ...string) (*Profiles, error) {
	ps := &Profiles{byName: map[string]*Profile{}}
	var all ErrorList
	for _, dir := range dirs {
		for _, path := range ProfileFiles(dir) {
			data, err := os.ReadFile(path)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("read profiles: %w", err)
			}
			list, err := ParseProfiles(path, data)
			var el ErrorList
			if errors.As(err, &el) {
				all = append(all, el...)
				continue
			}
			for _, p := range list {
				if _, dup := ps.byName[p.Name]; !dup {
					ps.byName[p.Name] = p
					ps.order = append(ps.order, p.Name)
				}
			}
		}
	}
	if len(all) > 0 {
		return nil, all
	}
	return ps, nil
}

// ParseProfiles reads one profiles.yml: `profiles:` followed by a list of
// profiles, each with a name, optionally `default: true`, and run fields.
func ParseProfiles(filename string, data []byte) ([]*Profile, error) {
	d := &decoder{file: filename, src: trimBOM(data)}
	body := d.document()
	if body == nil {
		return nil, d.errs
	}
	var out []*Profile
	d.object(body, "", "a profiles file", fields{
		"profiles": func(n ast.Node, p string) {
			items, _ := d.seq(n, p, "a list of profiles")
			names := map[string]bool{}
			for i, it := range items {
				ip := index(p, i)
				pr := &Profile{File: filename, set: map[string]bool{}}
				fs := d.profileFields(&pr.spec)
				fs["name"] = func(n ast.Node, p string) { pr.Name, _ = d.str(n, p) }
				fs["default"] = func(n ast.Node, p string) { pr.Default, _ = d.boolean(n, p) }
				present := d.object(it, ip, "a profile", fs)
				if present == nil {
					continue
				}
				d.require(present, it, ip, "name", "name the profile, like `name: large`")
				if names[pr.Name] {
					d.errorAt(present["name"], join(ip, "name"), "two profiles are named "+pr.Name, "rename one")
				}
				names[pr.Name] = true
				for k := range present {
					pr.set[k] = true
				}
				out = append(out, pr)
			}
		},
	})
	if len(d.errs) > 0 {
		return nil, d.errs.sorted()
	}
	return out, nil
}

// Names lists the profile names, sorted.
func (ps *Profiles) Names() []string {
	names := append([]string(nil), ps.order...)
	sort.Strings(names)
	return names
}

// Select returns the named profile; with an empty name, the profile marked
// `default: true` (the last one read, as dstack does), or nil when none is.
func (ps *Profiles) Select(name string) (*Profile, error) {
	if ps == nil {
		ps = &Profiles{}
	}
	if name == "" {
		var def *Profile
		for _, n := range ps.order {
			if p := ps.byName[n]; p.Default {
				def = p
			}
		}
		return def, nil
	}
	if p, ok := ps.byName[name]; ok {
		return p, nil
	}
	fix := "define it in .gpud/profiles.yml or .dstack/profiles.yml"
	if s := suggest(name, ps.Names()); s != "" {
		fix = "did you mean " + s + "?"
	}
	return nil, fmt.Errorf("profile %q is not defined: %s", name, fix)
}

// applyTo copies the profile's fields into r where r leaves them unset.
func (p *Profile) applyTo(r *RunSpec) {
	s := &p.spec
	for k := range p.set {
		switch k {
		case "priority":
			r.Priority = cmp.Or(r.Priority, s.Priority)
		case "queue":
			r.Queue = cmp.Or(r.Queue, s.Queue)
		case "preemptible":
			r.Preemptible = cmp.Or(r.Preemptible, s.Preemptible)
		case "backends":
			r.Backends = orList(r.Backends, s.Backends)
		case "regions":
			r.Regions = orList(r.Regions, s.Regions)
		case "availability_zones":
			r.AvailabilityZones = orList(r.AvailabilityZones, s.AvailabilityZones)
		case "instance_types":
			r.InstanceTypes = orList(r.InstanceTypes, s.InstanceTypes)
		case "fleets":
			r.Fleets = orList(r.Fleets, s.Fleets)
		case "reservation":
			r.Reservation = cmp.Or(r.Reservation, s.Reservation)
		case "spot_policy":
			r.SpotPolicy = cmp.Or(r.SpotPolicy, s.SpotPolicy)
		case "max_price":
			r.MaxPrice = cmp.Or(r.MaxPrice, s.MaxPrice)
		case "retry":
			r.Retry = cmp.Or(r.Retry, s.Retry)
		case "max_duration":
			r.MaxDuration = cmp.Or(r.MaxDuration, s.MaxDuration)
		case "stop_duration":
			r.StopDuration = cmp.Or(r.StopDuration, s.StopDuration)
		case "idle_duration":
			r.IdleDuration = cmp.Or(r.IdleDuration, s.IdleDuration)
		case "creation_policy":
			r.CreationPolicy = cmp.Or(r.CreationPolicy, s.CreationPolicy)
		case "utilization_policy":
			r.UtilizationPolicy = cmp.Or(r.UtilizationPolicy, s.UtilizationPolicy)
		case "schedule":
			r.Schedule = cmp.Or(r.Schedule, s.Schedule)
		case "tags":
			if r.Tags == nil && s.Tags != nil {
				r.Tags = make(map[string]string, len(s.Tags))
			}
			for k, v := range s.Tags {
				if _, ok := r.Tags[k]; !ok {
					r.Tags[k] = v
				}
			}
		}
	}
}

func orList(a, b []string) []string {
	if len(a) > 0 {
		return a
	}
	return append([]string(nil), b...)
}
