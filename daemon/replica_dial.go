package daemon

import (
	"context"
	"fmt"
	"net"

	"gpud.dev/gpud/store"
)

// dialJobPort opens a connection to the port a job publishes (its
// container port), wherever the job runs: directly on the server's own
// host, through the agent's link elsewhere. The gateway's replicas dial
// through it.
//
// TODO(issue 16): the relay through the agent; this first version reaches
// only the server's own host.
func (s *Server) dialJobPort(ctx context.Context, job store.Record, containerPort int) (net.Conn, error) {
	js, err := s.jobSpec(job)
	if err != nil {
		return nil, err
	}
	for _, p := range js.Ports {
		if p.Container == containerPort && p.Host != 0 {
			host := p.HostIP
			if host == "" || host == "0.0.0.0" {
				host = "127.0.0.1"
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", net.JoinHostPort(host, fmt.Sprint(p.Host)))
		}
	}
	return nil, fmt.Errorf("job %s publishes no port %d", job.ID, containerPort)
}
