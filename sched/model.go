package sched

import (
	"strings"
	"time"
)

// Resource names one schedulable resource kind.
type Resource int

// The resources fair share and quotas are kept for.
const (
	GPU    Resource = iota // in milli-GPUs: OneGPU is one whole device
	CPU                    // in milli-cores
	Memory                 // in bytes
	NumResources
)

// String returns the name used in scenarios and reasons: gpu, cpu, memory.
func (r Resource) String() string {
	return [...]string{"gpu", "cpu", "memory"}[r]
}

// OneGPU is one whole device in milli-GPUs: a task's GPU below it shares a
// device, at or above it is a multiple of it.
const OneGPU int64 = 1000

// OneCore is one CPU core in milli-cores.
const OneCore int64 = 1000

// Unit is the whole unit fair share is handed out in: one GPU, one core, 1GB.
func (r Resource) Unit() int64 {
	return [...]int64{OneGPU, OneCore, 1 << 30}[r]
}

// Unlimited marks a quota or limit without a bound.
const Unlimited int64 = -1

// Resources is an amount of each resource: GPU and CPU in milli-units,
// memory in bytes.
type Resources [NumResources]int64

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	for i := range r {
		r[i] += o[i]
	}
	return r
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	for i := range r {
		r[i] -= o[i]
	}
	return r
}

// Device is one GPU a node offers: a whole physical GPU or one MIG
// instance. Devices with different Name, Memory or MIG profile are distinct
// device types and never substitute for each other.
type Device struct {
	Index  int    // as the host numbers it; tasks refer to devices by Index
	Name   string // model, e.g. H100
	Memory int64  // bytes
	MIG    string // MIG profile such as 1g.10gb; empty for a whole GPU
}

// Node is one host the scheduler may place tasks on.
type Node struct {
	Name          string
	Labels        map[string]string
	Unschedulable bool  // cordoned: running tasks stay, nothing new lands
	CPU           int64 // milli-cores
	Memory        int64 // bytes
	Devices       []Device
}

// Queue is one node of the queue tree. Quota is the deserved amount,
// Limit the hard cap; either may be Unlimited per resource.
type Queue struct {
	Name            string
	Parent          string // empty for a top-level queue
	Quota           Resources
	Limit           Resources
	OverQuotaWeight [NumResources]float64
	Priority        int // higher gets over-quota share first
	// Min runtimes protect fresh tasks from eviction; nil inherits the
	// parent's value (zero at the top).
	PreemptMinRuntime *time.Duration
	ReclaimMinRuntime *time.Duration
}

// TaskStatus is where a task stands at snapshot time.
type TaskStatus int

// Task statuses in a snapshot.
const (
	Pending   TaskStatus = iota // waiting for a node
	Running                     // bound to Node and Devices
	Releasing                   // its job is terminating; it still holds its resources
)

// String returns the status as scenarios write it.
func (s TaskStatus) String() string {
	return [...]string{"pending", "running", "releasing"}[s]
}

// Task is one member of a job: it asks for resources and, when running,
// holds them on one node.
type Task struct {
	GPU       int64  // milli-GPUs: under OneGPU shares a device, else a multiple of OneGPU
	GPUName   string // empty: any model; several are separated by commas ("A100,H100"): any of them
	GPUMemory int64  // minimum device memory in bytes; 0: any
	MIG       string // MIG profile wanted; empty: whole GPUs or fractions of them
	MPS       bool   // passed through to the placement for the runtime
	CPU       int64  // milli-cores
	Memory    int64  // bytes

	// GPUMemoryMax is the maximum device memory in bytes; 0: no maximum.
	GPUMemoryMax int64

	Status  TaskStatus
	Node    string        // when running or releasing
	Devices []int         // device indices on Node
	Runtime time.Duration // how long it has been running
}

// Request returns the resources the task asks for.
func (t *Task) Request() Resources { return Resources{t.GPU, t.CPU, t.Memory} }

// TopologyConstraint asks that a job's tasks share one domain of a
// topology: Required must hold, Preferred is tried first.
type TopologyConstraint struct {
	Name      string // a Topology's name; empty: no constraint
	Required  string // a level name; empty: none
	Preferred string // a level name; empty: none
}

// Job is a gang of tasks scheduled together.
type Job struct {
	Name        string
	Queue       string // a leaf queue's name
	Priority    int
	Preemptible bool
	MinMembers  int // tasks that must run together; the rest grow elastically
	Topology    TopologyConstraint
	Tasks       []Task
	// StaleFor is how long the job has run below MinMembers.
	StaleFor time.Duration
	// StaleGangGrace, when set, replaces Policy.StaleGangGrace for this
	// job (KAI: the podgroup's stalenessGracePeriod); negative: never.
	StaleGangGrace *time.Duration
	// Nodes limits every placement of the job (allocate, consolidate,
	// reclaim, preempt) to the nodes it selects; the zero value selects
	// every node. The server uses it to keep a project's jobs on its own
	// fleets and the shared ones.
	Nodes NodeSelector
}

// NodeSelector selects the nodes whose label Key has one of Values; ""
// among Values also selects nodes without the label. An empty Key
// selects every node. And are further selectors a selected node must
// meet too (a run's fleets, the runtimes that honour its fields).
type NodeSelector struct {
	Key    string
	Values []string
	And    []NodeSelector
	// Name, when set, is how String (and so a pending job's reason)
	// describes the nodes Key and Values select; it does not change which.
	Name string
}

// IsZero reports whether s selects every node.
func (s NodeSelector) IsZero() bool {
	if s.Key != "" {
		return false
	}
	for _, a := range s.And {
		if !a.IsZero() {
			return false
		}
	}
	return true
}

// selects reports whether n is one of the selected nodes.
func (s NodeSelector) selects(n *Node) bool {
	for _, a := range s.And {
		if !a.selects(n) {
			return false
		}
	}
	if s.Key == "" {
		return true
	}
	v := n.Labels[s.Key]
	for _, want := range s.Values {
		if v == want {
			return true
		}
	}
	return false
}

// String describes the selected nodes: `project "a" or ""`, joined by "and".
func (s NodeSelector) String() string {
	var parts []string
	switch {
	case s.Key != "" && s.Name != "":
		parts = append(parts, s.Name)
	case s.Key != "":
		parts = append(parts, s.Key+" "+strings.Join(quoteAll(s.Values), " or "))
	}
	for _, a := range s.And {
		if !a.IsZero() {
			parts = append(parts, a.String())
		}
	}
	return strings.Join(parts, " and ")
}

// Topology names node-label levels, outermost first (zone, rack, ...).
type Topology struct {
	Name   string
	Levels []string
}

// UsageRecord is resource usage a queue accumulated, Age before now, in
// resource-hours (GPU-hours, core-hours, GB-hours).
type UsageRecord struct {
	Age   time.Duration
	Hours [NumResources]float64
}

// Usage configures time-based fair share: decayed historical usage shifts
// over-quota weight away from queues that used more than their weight.
type Usage struct {
	Window   time.Duration // records older than this are ignored; 0: DefaultUsageWindow
	HalfLife time.Duration // 0: no decay
	K        float64       // strength of the correction; 0 turns it off
	Queues   map[string][]UsageRecord
	// Capacity is the cluster's capacity-hours, recorded like Queues, that
	// usage is normalized to; empty: today's capacity over the whole window.
	Capacity []UsageRecord
}

// Action is one step of a scheduling cycle.
type Action string

// The actions, in the order a cycle runs them.
const (
	Allocate    Action = "allocate"
	Consolidate Action = "consolidate"
	Reclaim     Action = "reclaim"
	Preempt     Action = "preempt"
	StaleGang   Action = "stale_gang"
)

// AllActions returns every action in cycle order.
func AllActions() []Action {
	return []Action{Allocate, Consolidate, Reclaim, Preempt, StaleGang}
}

// Strategy chooses among nodes that fit.
type Strategy int

// Placement strategies.
const (
	BinPack Strategy = iota // fill the fullest node that fits
	Spread                  // use the emptiest node
)

// Policy tunes a cycle.
type Policy struct {
	Actions        []Action // nil: AllActions
	GPU, CPU       Strategy
	StaleGangGrace time.Duration
}

// Snapshot is everything one cycle sees. Queues list parents before their
// children; Jobs are in submission order (first is oldest). Schedule reads
// the snapshot and never modifies it.
type Snapshot struct {
	Nodes      []Node
	Queues     []Queue
	Jobs       []Job
	Topologies []Topology
	Usage      Usage
	Policy     Policy
}

// Placement binds one task to a node. Pipelined placements land on
// capacity that is still being freed (releasing tasks or victims of this
// cycle) and bind once it is free.
type Placement struct {
	Job       string
	Task      int
	Node      string
	Devices   []int
	Pipelined bool
	MPS       bool
	Action    Action
}

// Eviction stops one running task.
type Eviction struct {
	Job    string
	Task   int
	Node   string
	Action Action
	Reason string
}

// QueueShare is a queue's fair share and what it holds after the plan.
type QueueShare struct {
	Name      string
	FairShare Resources
	Allocated Resources
}

// Plan is the outcome of one cycle. Every slice is ordered deterministically:
// the same snapshot always gives the same plan.
type Plan struct {
	Placements []Placement
	Evictions  []Eviction
	// Pending maps every job with a task left unplaced to one sentence
	// saying why.
	Pending map[string]string
	Queues  []QueueShare // in snapshot order
}
