// Package agent owns the host side of gpud: it runs on every host, reports
// what the host has (CPU, memory, disk, accelerators from agent/gpu), runs
// jobs through one runtime (agent/runtime/docker, agent/runtime/process, or
// agent/runtime/mixed for both), keeps its small state in a bbolt file
// (agent/state) so it survives its own restarts, and serves all of it over
// the agent HTTP API (agent/server), directly or through the registration
// tunnel (agent/tunnel).
//
// Agent is the job manager between the API and a runtime: it records every
// transition, turns raw exits into states and reasons, and re-adopts the
// jobs a previous agent process started. OpenHostRuntime chooses the
// runtime under a RunPolicy (whom jobs run for: a host of its own, the
// server's host, the invoking user's laptop); agent/server.OpenHost
// assembles the whole agent, for `gpud agent` and the server's local agent
// alike.
//
// agent and its sub-packages must not import daemon, store, sched, plugins
// or proxy: the server talks to an agent only through the API.
package agent
