package daemon

import (
	"context"
)

// scaleFromZero asks for one replica of a service that has none (a
// service with replicas 0..n that has scaled to zero) and returns without
// waiting for it; the gateway waits for the replica to become ready.
//
// TODO(issue 16): the autoscaler; this first version asks for nothing.
func (s *Server) scaleFromZero(ctx context.Context, project, run string) error {
	_, _, _ = ctx, project, run
	return nil
}

// replicaReady says whether a running replica passed its probes (true
// for a service without probes). The gateway sends requests only to ready
// replicas.
//
// TODO(issue 16): the probes; this first version treats every running
// replica as ready.
func (s *Server) replicaReady(jobID string) bool {
	_ = jobID
	return true
}
