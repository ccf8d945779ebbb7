// Package agent owns the host side of gpud: it runs on every host, reports
// what the host has (CPU, memory, disk, accelerators from agent/gpu), runs
// jobs through one runtime (agent/runtime/docker or agent/runtime/process),
// keeps its small state in a bbolt file (agent/state) so it survives its own
// restarts, and serves all of it over the agent HTTP API (agent/server).
//
// Agent is the job manager between the API and a runtime: it records every
// transition, turns raw exits into states and reasons, and re-adopts the
// jobs a previous agent process started.
//
// agent and its sub-packages must not import daemon, store, sched, plugins
// or proxy: the server talks to an agent only through the API.
package agent
