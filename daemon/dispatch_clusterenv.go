package daemon

import (
	"context"
	"net"
	"strconv"
	"time"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/sched"
	"gpud.dev/gpud/store"
)

// A multi-node task's gang is bound in one transaction, so when a node is
// dispatched every node of its attempt knows its host. The cluster part of
// the job spec (DSTACK_*/GPUD_* on the host: rank, node count, master and
// node addresses, MPI hostfile, GPUs per node) is filled from those hosts.
// A service replica is a one-node job: rank 0 of 1, whatever the number of
// replicas (as on dstack); GPUD_REPLICA_NUM tells the replicas apart.

// fleetTopology has one level, the fleet label every node carries: a
// multi-node gang is required to land within one fleet, whose hosts are
// meant to reach each other (placement: cluster).
func fleetTopology() sched.Topology { return sched.Topology{Name: "fleet", Levels: []string{"fleet"}} }

// gangTopology is the scheduling constraint of a gang of n jobs of a run
// of type kind: a multi-node task's nodes share one fleet.
func gangTopology(kind api.Kind, n int) sched.TopologyConstraint {
	if kind == api.KindService || n < 2 {
		return sched.TopologyConstraint{}
	}
	return sched.TopologyConstraint{Name: "fleet", Required: "fleet"}
}

// jobCluster returns j's place in its gang with the addresses of the hosts
// the gang was placed on, in node-rank order (the master, rank 0, first).
// A corrupt record of the gang (a node's job, a host) is an error: the
// cluster's addresses would be wrong.
func (s *dispatcher) jobCluster(ctx context.Context, j store.Record, js jobRecordSpec) (api.JobCluster, error) {
	c := js.Spec.Cluster
	c.GPUsPerNode = len(js.Devices)
	if c.NodesNum <= 1 {
		return c, nil // one node: the agent fills its own defaults
	}
	ips := make([]string, c.NodesNum)
	for _, o := range s.store.Jobs().ByRun(j.Run) {
		os, err := s.jobSpec(o)
		if err != nil {
			return c, err
		}
		if os.Attempt != js.Attempt || os.ReplicaNum != js.ReplicaNum || os.NodeRank < 0 || os.NodeRank >= len(ips) || o.Instance == "" {
			continue
		}
		ip, err := s.instanceAddress(ctx, o.Instance)
		if err != nil {
			return c, err
		}
		ips[os.NodeRank] = ip
	}
	for _, ip := range ips {
		if ip == "" {
			return c, nil // a node is not placed (cannot happen for a bound gang)
		}
	}
	c.NodesIPs, c.MasterNodeIP = ips, ips[0]
	return c, nil
}

// Variables gpud sets in every job beside dstack's (dstack exports no
// attempt or replica number): the attempt, counted from 1 as `gpud logs
// --attempt` counts it, and the service replica (0 for tasks).
const (
	envRunAttempt = "GPUD_RUN_ATTEMPT"
	envReplicaNum = "GPUD_REPLICA_NUM"
)

// withJobIdentity adds the job's attempt and replica number to its
// environment, unless the configuration sets them itself.
func withJobIdentity(env map[string]string, js jobRecordSpec) map[string]string {
	if env == nil {
		env = map[string]string{}
	}
	for k, v := range map[string]string{envRunAttempt: strconv.Itoa(js.Attempt + 1), envReplicaNum: strconv.Itoa(js.ReplicaNum)} {
		if _, set := env[k]; !set {
			env[k] = v
		}
	}
	return env
}

// instanceAddress is the address other hosts reach instance at: an SSH
// host's internal_ip, else its hostname (resolved to an IP); for other
// hosts the first IPv4 address their agent reports; else loopback.
func (s *dispatcher) instanceAddress(ctx context.Context, instance string) (string, error) {
	s.hosts.ssh.mu.Lock()
	h := s.hosts.ssh.hosts[instance]
	s.hosts.ssh.mu.Unlock()
	if h != nil {
		if h.target.InternalIP != "" {
			return h.target.InternalIP, nil
		}
		if net.ParseIP(h.target.Hostname) != nil {
			return h.target.Hostname, nil
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if ips, err := net.DefaultResolver.LookupHost(lctx, h.target.Hostname); err == nil && len(ips) > 0 {
			return ips[0], nil
		}
		return h.target.Hostname, nil
	}
	inst, err := s.store.Instances().Get(instance)
	if err != nil {
		return "127.0.0.1", nil
	}
	st, err := s.instanceSpec(inst)
	if err != nil {
		return "", err
	}
	for _, a := range st.Host.Addresses {
		if ip := net.ParseIP(a); ip != nil && ip.To4() != nil {
			return a, nil
		}
	}
	if len(st.Host.Addresses) > 0 {
		return st.Host.Addresses[0], nil
	}
	return "127.0.0.1", nil
}
