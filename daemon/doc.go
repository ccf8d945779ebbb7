// Package daemon is gpud's server (`gpud serve` and the embedded default of
// `gpud run`): it wires the state store, the scheduler and the agents
// together. It owns the HTTP API of api/server.go (authentication and
// authorization against projects), the scheduler loop (store change feed ->
// sched.Schedule -> one committed plan -> binds dispatched to agents), the
// run and job reconcilers (DESIGN.md §4 state machines, retry, durations),
// job log collection, and the service proxy without a gateway.
//
// Each of these is a type of its own that holds the Server, and a file's
// name prefix says which: accountsAPI, runsAPI and fleetsAPI (api_*.go)
// serve the HTTP API by area; scheduler (scheduler_*.go) runs the
// scheduling loop; dispatcher (dispatch*.go) runs bound jobs on their
// agents and copies their logs; reconciler (reconcile*.go) drives the run
// state machines and policies; hosts (hosts_*.go) connects the local
// agent, SSH fleets and registration tunnels and handles lost hosts. Server
// itself keeps the wiring and lifecycle, routing and authentication, and
// the shared store, spec-cache and clock helpers. Beside them, the field
// rules (fields*.go) hold DESIGN.md §12's contract — every configuration
// field takes effect or the plan refuses it by name — and placement
// (placement*.go) matches runs to the hosts that can honour them. The
// service loop (autoscale.go, probes.go, rollout.go) keeps each running
// service's replicas: readiness probes, autoscaling on the gateway's
// request rate, rolling updates.
//
// daemon is the only package that imports store, sched and agent together.
// Nothing in gpud imports daemon except the command line (cli/); the
// layering test (internal/layering) enforces it.
package daemon
