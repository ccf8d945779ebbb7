package api

import (
	"github.com/goccy/go-yaml/ast"
)

// QueueSpec is a gpud scheduling queue (after KAI Scheduler): queues form a
// tree through Parent; each resource has a deserved Quota, a hard Limit and
// an OverQuotaWeight that divides unused capacity among siblings.
type QueueSpec struct {
	Type              Kind           `json:"type"`
	Name              string         `json:"name"`
	Parent            string         `json:"parent,omitempty"`
	Priority          int            `json:"priority"` // higher queues get over-quota capacity first
	PreemptMinRuntime *Duration      `json:"preempt_min_runtime,omitempty"`
	ReclaimMinRuntime *Duration      `json:"reclaim_min_runtime,omitempty"`
	Resources         QueueResources `json:"resources"`
}

// QueueResources holds the quota of each resource kind.
type QueueResources struct {
	GPU    QueueQuota  `json:"gpu"`
	CPU    QueueQuota  `json:"cpu"`
	Memory MemoryQuota `json:"memory"`
}

// MemoryQuota is QueueQuota for memory, in sizes ("512GB").
type MemoryQuota struct {
	Quota           SizeSpec  `json:"quota"`
	Limit           *SizeSpec `json:"limit,omitempty"`
	OverQuotaWeight float64   `json:"over_quota_weight"`
}

// QueueQuota is the share of one resource: Quota is deserved (GPUs, CPU
// cores, or bytes of memory), Limit caps usage (nil: no cap), and
// OverQuotaWeight (default 1) weighs the queue when capacity beyond quotas
// is shared.
type QueueQuota struct {
	Quota           float64  `json:"quota"`
	Limit           *float64 `json:"limit,omitempty"`
	OverQuotaWeight float64  `json:"over_quota_weight"`
}

func (d *decoder) queue(body ast.Node) *QueueSpec {
	q := &QueueSpec{Resources: QueueResources{
		GPU: QueueQuota{OverQuotaWeight: 1}, CPU: QueueQuota{OverQuotaWeight: 1}, Memory: MemoryQuota{OverQuotaWeight: 1},
	}}
	present := d.object(body, "", "a queue", fields{
		"type":                typeField(&q.Type, KindQueue),
		"name":                func(n ast.Node, p string) { q.Name, _ = value(d, n, p, checkName) },
		"parent":              func(n ast.Node, p string) { q.Parent, _ = value(d, n, p, checkName) },
		"priority":            func(n ast.Node, p string) { q.Priority, _ = d.integer(n, p, 0, 1000) },
		"preempt_min_runtime": func(n ast.Node, p string) { q.PreemptMinRuntime = d.duration(n, p, false) },
		"reclaim_min_runtime": func(n ast.Node, p string) { q.ReclaimMinRuntime = d.duration(n, p, false) },
		"resources": func(n ast.Node, p string) {
			d.object(n, p, "queue resources", fields{
				"gpu":    func(n ast.Node, p string) { q.Resources.GPU = d.quota(n, p) },
				"cpu":    func(n ast.Node, p string) { q.Resources.CPU = d.quota(n, p) },
				"memory": func(n ast.Node, p string) { q.Resources.Memory = d.memoryQuota(n, p) },
			})
		},
	})
	d.require(present, body, "", "name", "name the queue, like team-a")
	if q.Parent != "" && q.Parent == q.Name {
		d.errorAt(present["parent"], "parent", "a queue cannot be its own parent", "")
	}
	return q
}

// quota reads {quota, limit, over_quota_weight} in GPUs or CPU cores.
func (d *decoder) quota(n ast.Node, path string) QueueQuota {
	q := QueueQuota{OverQuotaWeight: 1}
	d.object(n, path, "a quota", fields{
		"quota": func(n ast.Node, p string) { q.Quota, _ = d.number(n, p) },
		"limit": func(n ast.Node, p string) {
			if v, ok := d.number(n, p); ok {
				q.Limit = &v
			}
		},
		"over_quota_weight": func(n ast.Node, p string) { q.OverQuotaWeight, _ = d.number(n, p) },
	})
	if q.Limit != nil && *q.Limit < q.Quota {
		d.errorAt(n, join(path, "limit"), "the limit is below the quota", "raise the limit or lower the quota")
	}
	return q
}

// memoryQuota reads {quota, limit, over_quota_weight} in sizes.
func (d *decoder) memoryQuota(n ast.Node, path string) MemoryQuota {
	q := MemoryQuota{OverQuotaWeight: 1}
	d.object(n, path, "a quota", fields{
		"quota": func(n ast.Node, p string) { q.Quota, _ = d.size(n, p) },
		"limit": func(n ast.Node, p string) {
			if v, ok := d.size(n, p); ok {
				q.Limit = &v
			}
		},
		"over_quota_weight": func(n ast.Node, p string) { q.OverQuotaWeight, _ = d.number(n, p) },
	})
	if q.Limit != nil && *q.Limit < q.Quota {
		d.errorAt(n, join(path, "limit"), "the limit is below the quota", "raise the limit or lower the quota")
	}
	return q
}
