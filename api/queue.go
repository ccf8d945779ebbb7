package api

import (
	"fmt"

	"github.com/goccy/go-yaml/ast"
)

// QueueSpec is a gpud scheduling queue (after KAI Scheduler). Queues form
// a tree through Parent. Per resource, Quota is the deserved share, Limit
// caps usage, and OverQuotaWeight divides capacity beyond the quotas among
// sibling queues. The shape is the one `gpud sim` scenarios use.
type QueueSpec struct {
	Type              Kind           `json:"type"`
	Name              string         `json:"name"`
	Parent            string         `json:"parent,omitempty"`
	Priority          int            `json:"priority"` // higher queues get over-quota capacity first
	Quota             QueueResources `json:"quota"`
	Limit             QueueLimits    `json:"limit,omitzero"`
	OverQuotaWeight   QueueWeights   `json:"over_quota_weight"`
	PreemptMinRuntime *Duration      `json:"preempt_min_runtime,omitempty"`
	ReclaimMinRuntime *Duration      `json:"reclaim_min_runtime,omitempty"`
}

// QueueResources is an amount of each resource in a queue configuration:
// GPUs (fractions allowed), CPU cores, and memory.
type QueueResources struct {
	GPU    float64  `json:"gpu"`
	CPU    float64  `json:"cpu"`
	Memory SizeSpec `json:"memory"`
}

// QueueLimits caps each resource; nil means no cap.
type QueueLimits struct {
	GPU    *float64  `json:"gpu,omitempty"`
	CPU    *float64  `json:"cpu,omitempty"`
	Memory *SizeSpec `json:"memory,omitempty"`
}

// IsZero reports whether no limit is set.
func (l QueueLimits) IsZero() bool { return l.GPU == nil && l.CPU == nil && l.Memory == nil }

// QueueWeights is the over-quota weight of each resource (default 1).
type QueueWeights struct {
	GPU    float64 `json:"gpu"`
	CPU    float64 `json:"cpu"`
	Memory float64 `json:"memory"`
}

func (d *decoder) queue(body ast.Node) *QueueSpec {
	q := &QueueSpec{OverQuotaWeight: QueueWeights{GPU: 1, CPU: 1, Memory: 1}}
	present := d.object(body, "", "a queue", fields{
		"type":                typeField(&q.Type, KindQueue),
		"name":                func(n ast.Node, p string) { q.Name, _ = value(d, n, p, checkName) },
		"parent":              func(n ast.Node, p string) { q.Parent, _ = value(d, n, p, checkName) },
		"priority":            func(n ast.Node, p string) { q.Priority, _ = d.integer(n, p, 0, 1000) },
		"preempt_min_runtime": func(n ast.Node, p string) { q.PreemptMinRuntime = d.duration(n, p, false) },
		"reclaim_min_runtime": func(n ast.Node, p string) { q.ReclaimMinRuntime = d.duration(n, p, false) },
		"quota": func(n ast.Node, p string) {
			d.object(n, p, "quotas per resource", fields{
				"gpu":    func(n ast.Node, p string) { q.Quota.GPU, _ = d.number(n, p) },
				"cpu":    func(n ast.Node, p string) { q.Quota.CPU, _ = d.number(n, p) },
				"memory": func(n ast.Node, p string) { q.Quota.Memory, _ = d.size(n, p) },
			})
		},
		"limit": func(n ast.Node, p string) {
			d.object(n, p, "limits per resource", fields{
				"gpu":    func(n ast.Node, p string) { q.Limit.GPU = numberPtr(d.number(n, p)) },
				"cpu":    func(n ast.Node, p string) { q.Limit.CPU = numberPtr(d.number(n, p)) },
				"memory": func(n ast.Node, p string) { q.Limit.Memory = sizePtr(d.size(n, p)) },
			})
		},
		"over_quota_weight": func(n ast.Node, p string) {
			if !d.isMap(n) {
				if w, ok := d.number(n, p); ok {
					q.OverQuotaWeight = QueueWeights{GPU: w, CPU: w, Memory: w}
				}
				return
			}
			d.object(n, p, "weights per resource", fields{
				"gpu":    func(n ast.Node, p string) { q.OverQuotaWeight.GPU, _ = d.number(n, p) },
				"cpu":    func(n ast.Node, p string) { q.OverQuotaWeight.CPU, _ = d.number(n, p) },
				"memory": func(n ast.Node, p string) { q.OverQuotaWeight.Memory, _ = d.number(n, p) },
			})
		},
	})
	d.require(present, body, "", "name", "name the queue, like team-a")
	if q.Parent != "" && q.Parent == q.Name {
		d.errorAt(present["parent"], "parent", "a queue cannot be its own parent", "")
	}
	below := func(res string, limit, quota float64) {
		if limit < quota {
			d.errorAt(present["limit"], "limit."+res, fmt.Sprintf("the %s limit is below the quota", res), "raise the limit or lower the quota")
		}
	}
	if q.Limit.GPU != nil {
		below("gpu", *q.Limit.GPU, q.Quota.GPU)
	}
	if q.Limit.CPU != nil {
		below("cpu", *q.Limit.CPU, q.Quota.CPU)
	}
	if q.Limit.Memory != nil {
		below("memory", float64(*q.Limit.Memory), float64(q.Quota.Memory))
	}
	return q
}

func numberPtr(v float64, ok bool) *float64 {
	if !ok {
		return nil
	}
	return &v
}

func sizePtr(v SizeSpec, ok bool) *SizeSpec {
	if !ok {
		return nil
	}
	return &v
}
