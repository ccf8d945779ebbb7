// Package daemon is gpud's server (`gpud serve` and the embedded default of
// `gpud run`): it wires the state store, the scheduler and the agents
// together. It owns the HTTP API of api/server.go (authentication and
// authorization against projects), the scheduler loop (store change feed ->
// sched.Schedule -> one committed plan -> binds dispatched to agents), the
// run and job reconcilers (DESIGN.md §4 state machines, retry, durations),
// job log collection, and the service proxy without a gateway.
//
// daemon is the only package that imports store, sched and agent together.
// Nothing in gpud imports daemon except the command line (cli/); the
// layering test (internal/layering) enforces it.
package daemon
