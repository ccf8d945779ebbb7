// Package sched owns gpud's scheduling decisions: it turns one Snapshot of
// the cluster (nodes and their GPU devices, the queue tree, jobs and their
// tasks, usage history) into one Plan (placements, evictions, fair shares
// and a reason for every job left pending).
//
// Each cycle runs the actions allocate, consolidate, reclaim, preempt and
// stale-gang eviction, in that order, with KAI Scheduler's semantics:
// hierarchical per-resource fair share, all-or-nothing gangs, elastic jobs,
// fractional GPUs, topology-aware placement and min runtimes.
//
// sched is pure: no I/O, no clock reads (time enters as durations in the
// snapshot), no goroutines, no logging. It must not import any other gpud
// package; the daemon and sched/scenario translate their own types into
// the value types defined here.
package sched
