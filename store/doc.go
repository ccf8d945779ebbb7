// Package store owns gpud's durable state: one bbolt file holding typed
// records (projects, users, members, queues, fleets, instances, runs, jobs,
// volumes, gateways, service replicas, secrets, backends, events, usage),
// a key-value namespace for certmagic, and the job logs kept beside it.
//
// Guarantees, in short:
//   - A mutation returns only after the transaction holding it is committed
//     and fsynced. One writer goroutine groups concurrent callers into one
//     transaction (group commit); Apply of many mutations is atomic.
//   - Reads (Get and index queries) come from in-memory indexes rebuilt at
//     Open; they never open a bbolt transaction.
//   - Every commit is published, in commit order, to subscribers of the
//     change feed; a slow subscriber is marked lagged, never waited for.
//   - Record.Sealed and every key-value value are encrypted with
//     AES-256-GCM before they reach the disk, unless Options.Plaintext.
//
// store must not import daemon, sched, agent, plugins or proxy; it does not
// import api either: records carry the fields the indexes need and an opaque
// Spec that the server fills with its own wire types.
package store
