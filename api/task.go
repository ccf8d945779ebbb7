package api

import (
	"github.com/goccy/go-yaml/ast"
)

// TaskSpec is a batch job: commands that run to completion, on one node or
// as a gang of Nodes. Nodes with Min < Max is gpud's elastic gang: it starts
// once Min nodes are placed and grows up to Max.
type TaskSpec struct {
	RunSpec
	Commands     []string      `json:"commands,omitempty"`
	Ports        []PortMapping `json:"ports,omitempty"`
	Nodes        Range[int]    `json:"nodes,omitzero"` // unset (zero) when Groups is set
	Groups       []TaskGroup   `json:"groups,omitempty"`
	StartupOrder string        `json:"startup_order"` // any, master-first, workers-first
	StopCriteria string        `json:"stop_criteria"` // all-done, master-done
}

// Elastic reports whether the task may run on a varying number of nodes.
func (t *TaskSpec) Elastic() bool {
	return t.Nodes.Min != nil && t.Nodes.Max != nil && *t.Nodes.Min != *t.Nodes.Max
}

// TaskGroup is a set of nodes of a multi-node task with its own commands
// and resources (dstack's heterogeneous clusters: a head and workers).
type TaskGroup struct {
	Name      string        `json:"name,omitempty"`
	Nodes     Range[int]    `json:"nodes"`
	Image     string        `json:"image,omitempty"`
	Python    string        `json:"python,omitempty"`
	Env       Env           `json:"env,omitempty"`
	Commands  []string      `json:"commands,omitempty"`
	Ports     []PortMapping `json:"ports,omitempty"`
	Resources *Resources    `json:"resources,omitempty"`
}

// Task startup orders and stop criteria.
const (
	StartupAny          = "any"
	StartupMasterFirst  = "master-first"
	StartupWorkersFirst = "workers-first"
	StopAllDone         = "all-done"
	StopMasterDone      = "master-done"
)

const maxNodes = 4096

func (d *decoder) task(body ast.Node) *TaskSpec {
	t := &TaskSpec{}
	fs := d.runFields(&t.RunSpec, KindTask)
	fs["commands"] = func(n ast.Node, p string) { t.Commands = d.strList(n, p) }
	fs["ports"] = func(n ast.Node, p string) { t.Ports = d.ports(n, p) }
	fs["nodes"] = func(n ast.Node, p string) { t.Nodes = d.nodes(n, p) }
	fs["startup_order"] = func(n ast.Node, p string) {
		t.StartupOrder, _ = d.oneOf(n, p, StartupAny, StartupMasterFirst, StartupWorkersFirst)
	}
	fs["stop_criteria"] = func(n ast.Node, p string) {
		t.StopCriteria, _ = d.oneOf(n, p, StopAllDone, StopMasterDone)
	}
	fs["groups"] = func(n ast.Node, p string) { t.Groups = d.taskGroups(n, p) }
	present := d.object(body, "", "a task", fs)
	d.checkRun(&t.RunSpec, present, "")
	if len(t.Groups) > 0 && !t.Nodes.IsZero() {
		d.errorAt(present["nodes"], "nodes", "nodes and groups cannot both be set", "give each group its nodes")
	}
	return t
}

// nodes reads a node count: N, or an elastic range a..b (b is required).
func (d *decoder) nodes(n ast.Node, path string) Range[int] {
	r, ok := d.countRange(n, path)
	if !ok {
		return Range[int]{}
	}
	switch {
	case r.Max == nil:
		d.errorAt(n, path, "an elastic task needs a maximum number of nodes", "write a range with both bounds, like 2..8")
		return Range[int]{}
	case r.Min == nil || *r.Min < 1:
		d.errorAt(n, path, "a task needs at least one node", "write 1 or more, or a range like 2..8")
		return Range[int]{}
	case *r.Max > maxNodes:
		d.errorAt(n, path, "too many nodes", "use at most 4096")
		return Range[int]{}
	}
	return r
}

func (d *decoder) taskGroups(n ast.Node, path string) []TaskGroup {
	items, _ := d.seq(n, path, "a list of node groups")
	out := make([]TaskGroup, 0, len(items))
	names := map[string]bool{}
	for i, it := range items {
		p := index(path, i)
		var g TaskGroup
		present := d.object(it, p, "a node group", fields{
			"name":     func(n ast.Node, p string) { g.Name, _ = value(d, n, p, checkName) },
			"nodes":    func(n ast.Node, p string) { g.Nodes = d.nodes(n, p) },
			"image":    func(n ast.Node, p string) { g.Image, _ = d.str(n, p) },
			"python":   func(n ast.Node, p string) { g.Python, _ = d.oneOf(n, p, "3.9", "3.10", "3.11", "3.12", "3.13") },
			"env":      func(n ast.Node, p string) { g.Env = d.env(n, p) },
			"commands": func(n ast.Node, p string) { g.Commands = d.strList(n, p) },
			"ports":    func(n ast.Node, p string) { g.Ports = d.ports(n, p) },
			"resources": func(n ast.Node, p string) {
				r := d.resources(n, p)
				g.Resources = &r
			},
		})
		if present == nil {
			continue
		}
		if g.Name != "" && names[g.Name] {
			d.errorAt(present["name"], join(p, "name"), "two groups are named "+g.Name, "give each group its own name")
		}
		names[g.Name] = true
		out = append(out, g)
	}
	return out
}

func (t *TaskSpec) setDefaults() {
	t.RunSpec.setDefaults()
	if t.Nodes.IsZero() && len(t.Groups) == 0 {
		t.Nodes = Exact(1)
	}
	for i := range t.Groups {
		if t.Groups[i].Nodes.IsZero() {
			t.Groups[i].Nodes = Exact(1)
		}
		if t.Groups[i].Resources != nil {
			t.Groups[i].Resources.setDefaults()
		}
	}
	if t.StartupOrder == "" {
		t.StartupOrder = StartupAny
	}
	if t.StopCriteria == "" {
		t.StopCriteria = StopAllDone
	}
}
