// Package scenario reads scheduler scenario files (the YAML `gpud sim`
// takes), runs their cycles through package sched and reports the result
// in the --json contract shape. It is the only part of the scheduler that
// reads files; it imports api for quantities and must not import daemon.
package scenario

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/sched"
)

// Scenario is a parsed scenario: the first snapshot and how to run it.
type Scenario struct {
	Snapshot    sched.Snapshot
	Cycles      int
	CycleLength time.Duration // how much runtime a cycle adds to running tasks
	TaskStatus  [][]string    // per job, per task: the status as written
	Expect      any           // the file's expect: block, if any
	HasExpect   bool
	// ExpectCycles holds the file's expect_cycles: block: by cycle number
	// (1 is the first), what the state after that cycle must match.
	ExpectCycles map[int]any
}

type fileNode struct {
	Name        string            `yaml:"name"`
	GPUs        int               `yaml:"gpus"`
	GPUName     string            `yaml:"gpu_name"`
	GPUMemory   any               `yaml:"gpu_memory"`
	MIG         map[string]int    `yaml:"mig"`
	CPU         any               `yaml:"cpu"`
	Memory      any               `yaml:"memory"`
	Labels      map[string]string `yaml:"labels"`
	Schedulable *bool             `yaml:"schedulable"`
}

type fileQueue struct {
	Name              string         `yaml:"name"`
	Parent            string         `yaml:"parent"`
	Quota             map[string]any `yaml:"quota"`
	Limit             map[string]any `yaml:"limit"`
	OverQuotaWeight   any            `yaml:"over_quota_weight"`
	Priority          *int           `yaml:"priority"`
	PreemptMinRuntime string         `yaml:"preempt_min_runtime"`
	ReclaimMinRuntime string         `yaml:"reclaim_min_runtime"`
}

type fileTask struct {
	GPU       any    `yaml:"gpu"`
	GPUName   string `yaml:"gpu_name"`
	GPUMemory any    `yaml:"gpu_memory"`
	MIG       string `yaml:"mig"`
	MPS       bool   `yaml:"mps"`
	CPU       any    `yaml:"cpu"`
	Memory    any    `yaml:"memory"`
	Status    string `yaml:"status"`
	Node      string `yaml:"node"`
	Device    *int   `yaml:"device"`
	Devices   []int  `yaml:"devices"`
	Runtime   string `yaml:"runtime"`
	Count     int    `yaml:"count"`
}

type fileJob struct {
	Name        string `yaml:"name"`
	Queue       string `yaml:"queue"`
	Priority    any    `yaml:"priority"`
	Preemptible *bool  `yaml:"preemptible"`
	MinMembers  int    `yaml:"min_members"`
	Topology    struct {
		Name      string `yaml:"name"`
		Required  string `yaml:"required"`
		Preferred string `yaml:"preferred"`
	} `yaml:"topology"`
	Tasks    []fileTask `yaml:"tasks"`
	StaleFor string     `yaml:"stale_for"`
	// StaleGangGrace overrides run.stale_gang_grace for this job.
	StaleGangGrace string `yaml:"stale_gang_grace"`
	// Nodes is sched.Job.Nodes: {key: project, values: ["", a]}.
	Nodes struct {
		Key    string   `yaml:"key"`
		Values []string `yaml:"values"`
	} `yaml:"nodes"`
}

type fileUsageEntry struct {
	Age         string  `yaml:"age"`
	GPUHours    float64 `yaml:"gpu_hours"`
	CPUHours    float64 `yaml:"cpu_hours"`
	MemoryHours float64 `yaml:"memory_gb_hours"`
}

// usageEntries reads one record ({gpu_hours: 24}) or a list of them.
type usageEntries []fileUsageEntry

// UnmarshalYAML accepts a single record as well as a list.
func (u *usageEntries) UnmarshalYAML(unmarshal func(any) error) error {
	var list []fileUsageEntry
	if err := unmarshal(&list); err == nil {
		*u = list
		return nil
	}
	var one fileUsageEntry
	if err := unmarshal(&one); err != nil {
		return err
	}
	*u = usageEntries{one}
	return nil
}

type file struct {
	Nodes      []fileNode `yaml:"nodes"`
	Topologies []struct {
		Name   string   `yaml:"name"`
		Levels []string `yaml:"levels"`
	} `yaml:"topologies"`
	Queues []fileQueue `yaml:"queues"`
	Jobs   []fileJob   `yaml:"jobs"`
	Usage  struct {
		Window   string                  `yaml:"window"`
		HalfLife string                  `yaml:"half_life"`
		K        *float64                `yaml:"k"`
		Queues   map[string]usageEntries `yaml:"queues"`
		Capacity usageEntries            `yaml:"capacity"`
	} `yaml:"usage"`
	Run struct {
		Actions        []string          `yaml:"actions"`
		Cycles         int               `yaml:"cycles"`
		Placement      map[string]string `yaml:"placement"`
		StaleGangGrace string            `yaml:"stale_gang_grace"`
		CycleLength    string            `yaml:"cycle_length"`
	} `yaml:"run"`
	Expect       any         `yaml:"expect"`
	ExpectCycles map[int]any `yaml:"expect_cycles"`
}

// LoadFile reads and validates a scenario file.
func LoadFile(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	var f file
	if err := api.DecodeYAML(path, data, &f); err != nil {
		return nil, err // names the file, line and column
	}
	s, err := build(&f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Parse reads a scenario from YAML. It reports every field error it
// finds, each with its path, joined.
func Parse(data []byte) (*Scenario, error) {
	var f file
	if err := api.DecodeYAML("", data, &f); err != nil {
		return nil, err
	}
	return build(&f)
}

// build checks a decoded scenario and makes it.
func build(fp *file) (*Scenario, error) {
	f := *fp
	b := &builder{}
	s := &Scenario{Cycles: max(f.Run.Cycles, 1), Expect: f.Expect, HasExpect: f.Expect != nil}
	snap := &s.Snapshot
	b.nodes(snap, f.Nodes)
	for _, t := range f.Topologies {
		snap.Topologies = append(snap.Topologies, sched.Topology{Name: t.Name, Levels: t.Levels})
	}
	b.queues(snap, f.Queues)
	b.jobs(snap, f.Jobs)
	b.usage(snap, &f)
	b.run(s, &f)
	for _, n := range sortedInts(f.ExpectCycles) {
		if n < 1 || n > s.Cycles {
			b.fail(fmt.Sprintf("expect_cycles.%d", n), "no such cycle: run.cycles is %d, cycles count from 1", s.Cycles)
		}
	}
	s.ExpectCycles = f.ExpectCycles
	s.HasExpect = s.HasExpect || len(f.ExpectCycles) > 0
	if len(b.errs) > 0 {
		return nil, errors.Join(b.errs...)
	}
	return s, nil
}

// builder collects every error instead of stopping at the first.
type builder struct{ errs []error }

func (b *builder) fail(path string, format string, args ...any) {
	b.errs = append(b.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// number reads a plain number (int or float) from a YAML scalar.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case uint64:
		return float64(x), true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// milli reads a count of GPUs or cores into milli-units; -1 stays -1.
func (b *builder) milli(path string, v any, def int64) int64 {
	if v == nil {
		return def
	}
	f, ok := number(v)
	if !ok {
		b.fail(path, "%v is not a number", v)
		return def
	}
	if f < 0 {
		return sched.Unlimited
	}
	return int64(math.Round(f * 1000))
}

// size reads memory: "80GB", "512MB" or a bare number of gigabytes.
func (b *builder) size(path string, v any, def int64) int64 {
	if v == nil {
		return def
	}
	if f, ok := number(v); ok {
		if f < 0 {
			return sched.Unlimited
		}
		return int64(f * float64(api.GB))
	}
	sz, err := api.ParseSize(fmt.Sprint(v))
	if err != nil {
		b.fail(path, "%v", err)
		return def
	}
	return int64(sz)
}

func (b *builder) duration(path, v string) time.Duration {
	if v == "" {
		return 0
	}
	d, err := api.ParseDuration(v)
	if err != nil {
		b.fail(path, "%v", err)
	}
	return d
}

func (b *builder) nodes(snap *sched.Snapshot, nodes []fileNode) {
	seen := map[string]bool{}
	for i, n := range nodes {
		p := fmt.Sprintf("nodes[%d]", i)
		if n.Name == "" || seen[n.Name] {
			b.fail(p+".name", "%q: every node needs a unique name", n.Name)
		}
		seen[n.Name] = true
		node := sched.Node{
			Name: n.Name, Labels: n.Labels,
			CPU:    b.milli(p+".cpu", n.CPU, 64000),
			Memory: b.size(p+".memory", n.Memory, 512*int64(api.GB)),
		}
		if n.Schedulable != nil {
			node.Unschedulable = !*n.Schedulable
		}
		mem := b.size(p+".gpu_memory", n.GPUMemory, 0)
		for d := 0; d < n.GPUs; d++ {
			node.Devices = append(node.Devices, sched.Device{Index: d, Name: n.GPUName, Memory: mem})
		}
		for _, profile := range sortedKeys(n.MIG) {
			// A profile such as 3g.40gb names its memory after the dot.
			var pmem int64
			if _, after, ok := strings.Cut(profile, "."); ok {
				if sz, err := api.ParseSize(after); err == nil {
					pmem = int64(sz)
				}
			}
			for k := 0; k < n.MIG[profile]; k++ {
				node.Devices = append(node.Devices, sched.Device{Index: len(node.Devices), Name: n.GPUName, Memory: pmem, MIG: profile})
			}
		}
		snap.Nodes = append(snap.Nodes, node)
	}
}

func (b *builder) resources(path string, m map[string]any, def int64) sched.Resources {
	r := sched.Resources{def, def, def}
	for k, v := range m {
		switch k {
		case "gpu":
			r[sched.GPU] = b.milli(path+".gpu", v, def)
		case "cpu":
			r[sched.CPU] = b.milli(path+".cpu", v, def)
		case "memory":
			r[sched.Memory] = b.size(path+".memory", v, def)
		default:
			b.fail(path+"."+k, "unknown resource: use gpu, cpu or memory")
		}
	}
	return r
}

func (b *builder) queues(snap *sched.Snapshot, queues []fileQueue) {
	seen := map[string]bool{}
	hasChildren := map[string]bool{}
	for _, q := range queues {
		hasChildren[q.Parent] = true
	}
	for i, q := range queues {
		p := fmt.Sprintf("queues[%d]", i)
		if q.Name == "" || seen[q.Name] {
			b.fail(p+".name", "%q: every queue needs a unique name", q.Name)
		}
		if q.Parent != "" && !seen[q.Parent] {
			b.fail(p+".parent", "%q is not a queue listed before this one", q.Parent)
		}
		seen[q.Name] = true
		quotaDefault := int64(0)
		if hasChildren[q.Name] {
			quotaDefault = sched.FromChildren
		}
		sq := sched.Queue{
			Name: q.Name, Parent: q.Parent, Priority: 100,
			Quota: b.resources(p+".quota", q.Quota, quotaDefault),
			Limit: b.resources(p+".limit", q.Limit, sched.Unlimited),
		}
		if q.Priority != nil {
			sq.Priority = *q.Priority
		}
		sq.OverQuotaWeight = [sched.NumResources]float64{1, 1, 1}
		switch w := q.OverQuotaWeight.(type) {
		case nil:
		case map[string]any:
			for k, v := range w {
				f, ok := number(v)
				r := map[string]sched.Resource{"gpu": sched.GPU, "cpu": sched.CPU, "memory": sched.Memory}
				res, known := r[k]
				if !ok || !known || f < 0 {
					b.fail(p+".over_quota_weight."+k, "%v: use gpu, cpu or memory with a number of zero or more", v)
					continue
				}
				sq.OverQuotaWeight[res] = f
			}
		default:
			f, ok := number(w)
			if !ok || f < 0 {
				b.fail(p+".over_quota_weight", "%v: write a number of zero or more, or {gpu: 2, cpu: 1}", w)
			}
			sq.OverQuotaWeight = [sched.NumResources]float64{f, f, f}
		}
		if q.PreemptMinRuntime != "" {
			d := b.duration(p+".preempt_min_runtime", q.PreemptMinRuntime)
			sq.PreemptMinRuntime = &d
		}
		if q.ReclaimMinRuntime != "" {
			d := b.duration(p+".reclaim_min_runtime", q.ReclaimMinRuntime)
			sq.ReclaimMinRuntime = &d
		}
		snap.Queues = append(snap.Queues, sq)
	}
}

// priorityClasses are the named priorities jobs may use.
func priorityClasses() map[string]int {
	return map[string]int{"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}
}
