package daemon

import (
	"context"
	"fmt"
	"net"

	"gpud.dev/gpud/store"
)

// dialJobPort opens a connection to the port a job publishes (its
// container port), wherever the job runs: the job's agent dials the
// port's host side on its own host and relays the bytes over the
// server's authenticated link to it (agentclient.DialPort). One path for
// every host — the server's own, an SSH fleet's, a registered one — so
// no replica needs a port reachable from the server. A job on a job
// backend is dialed through its backend (plugins.PortDialer). The gateway's
// replicas and the readiness probes dial through it.
func (s *Server) dialJobPort(ctx context.Context, job store.Record, containerPort int) (net.Conn, error) {
	if job.Instance == "" {
		return nil, fmt.Errorf("job %s is not placed on a host", job.ID)
	}
	if project, name, ok := backendOfNode(job.Instance); ok {
		return s.dialBackendJobPort(ctx, job, project, name, containerPort) // backend_dial.go
	}
	link := s.agents.get(job.Instance)
	if link == nil || link.client == nil || !s.dispatcher.hostServes(job.Instance, job.Project) {
		return nil, fmt.Errorf("job %s: the host %s has no agent connected", job.ID, job.Instance)
	}
	conn, err := link.client.DialPort(ctx, job.ID, containerPort)
	if err != nil {
		return nil, fmt.Errorf("job %s: port %d on %s: %w", job.ID, containerPort, job.Instance, err)
	}
	return conn, nil
}
