package store

import (
	"bytes"
	"encoding/json"
	"time"
)

// Kind names a collection; it is also the name of the record's bbolt bucket.
type Kind string

// The record kinds. Each has its own bucket and its own indexes.
const (
	KindProject  Kind = "projects"
	KindUser     Kind = "users"
	KindMember   Kind = "members" // ID is "project/user"; Role holds admin, manager or user
	KindQueue    Kind = "queues"
	KindFleet    Kind = "fleets"
	KindInstance Kind = "instances" // a host, provisioned or attached
	KindRun      Kind = "runs"
	KindJob      Kind = "jobs"
	KindVolume   Kind = "volumes"
	KindGateway  Kind = "gateways"
	KindReplica  Kind = "replicas" // service replicas
	KindSecret   Kind = "secrets"
	KindBackend  Kind = "backends" // backend configurations and their credentials
	KindEvent    Kind = "events"
	KindUsage    Kind = "usage" // per-queue resource-seconds; see AddUsage
	// KindKV is the key-value namespace; it appears only in Change.Kind.
	KindKV Kind = "kv"
)

// Kinds lists every record kind, in bucket order.
func Kinds() []Kind {
	return []Kind{KindProject, KindUser, KindMember, KindQueue, KindFleet, KindInstance, KindRun,
		KindJob, KindVolume, KindGateway, KindReplica, KindSecret, KindBackend, KindEvent, KindUsage}
}

func knownKind(k Kind) bool {
	for _, x := range Kinds() {
		if x == k {
			return true
		}
	}
	return false
}

// Run statuses (dstack names, DESIGN.md §4).
const (
	RunPending      = "pending"
	RunSubmitted    = "submitted"
	RunProvisioning = "provisioning"
	RunRunning      = "running"
	RunTerminating  = "terminating"
	RunTerminated   = "terminated"
	RunFailed       = "failed"
	RunDone         = "done"
)

// Job statuses (dstack names, DESIGN.md §4).
const (
	JobSubmitted    = "submitted"
	JobProvisioning = "provisioning"
	JobPulling      = "pulling"
	JobRunning      = "running"
	JobTerminating  = "terminating"
	JobTerminated   = "terminated"
	JobAborted      = "aborted"
	JobFailed       = "failed"
	JobDone         = "done"
)

// Instance statuses (dstack names, DESIGN.md §4).
const (
	InstancePending      = "pending"
	InstanceProvisioning = "provisioning"
	InstanceIdle         = "idle"
	InstanceBusy         = "busy"
	InstanceTerminating  = "terminating"
	InstanceTerminated   = "terminated"
)

// Record is one stored object of any kind. The named fields are the ones the
// indexes and reference checks need; everything else lives in Spec, which the
// store treats as opaque JSON. Sealed holds secret material (secret values,
// registry credentials, SSH private keys, backend credentials): it is
// encrypted on disk and kept in plaintext only in memory.
//
// Records returned by the store are copies, but Spec and Sealed share memory
// with the store's index: callers must not modify those byte slices.
type Record struct {
	Kind      Kind            `json:"-"`
	ID        string          `json:"id"`
	Project   string          `json:"project,omitempty"`
	Name      string          `json:"name,omitempty"`
	Status    string          `json:"status,omitempty"`
	Queue     string          `json:"queue,omitempty"`
	Fleet     string          `json:"fleet,omitempty"`
	Instance  string          `json:"instance,omitempty"` // the host a job or replica is bound to
	Run       string          `json:"run,omitempty"`      // the parent run of a job or replica
	User      string          `json:"user,omitempty"`
	Role      string          `json:"role,omitempty"`
	TokenHash string          `json:"token_hash,omitempty"` // users: HashToken of the API token
	Reason    string          `json:"reason,omitempty"`     // why the last status change happened
	Version   uint64          `json:"version"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	Spec      json.RawMessage `json:"spec,omitempty"`
	Sealed    []byte          `json:"-"`
}

// sameContent reports whether a and b differ only in version and timestamps,
// so that writing b over a would change nothing a reader can see.
func sameContent(a, b *Record) bool {
	return a.ID == b.ID && a.Project == b.Project && a.Name == b.Name && a.Status == b.Status &&
		a.Queue == b.Queue && a.Fleet == b.Fleet && a.Instance == b.Instance && a.Run == b.Run &&
		a.User == b.User && a.Role == b.Role && a.TokenHash == b.TokenHash && a.Reason == b.Reason &&
		bytes.Equal(a.Spec, b.Spec) && bytes.Equal(a.Sealed, b.Sealed)
}
