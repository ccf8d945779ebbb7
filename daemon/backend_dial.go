package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"

	"gpud.dev/gpud/api"
	"gpud.dev/gpud/plugins"
	"gpud.dev/gpud/store"
)

// dialBackendJobPort opens a connection to a port of a job that runs on
// the job backend name of project: the backend dials it (the test
// plugin: a loopback port of its process; Kubernetes: the API server's
// pod port-forward) and the bytes come over the plugin's DialPort stream.
// Only the job's own project's backends are asked, as the dispatcher
// does.
func (s *Server) dialBackendJobPort(ctx context.Context, job store.Record, project, name string, port int) (net.Conn, error) {
	if project != job.Project {
		return nil, fmt.Errorf("job %s is on another project's backend", job.ID)
	}
	b := s.dispatcher.Backends(project)[name]
	if b == nil {
		return nil, fmt.Errorf("job %s: its backend %s is gone (deleted, or its plugin did not start)", job.ID, name)
	}
	conn, err := plugins.DialPort(ctx, b, job.ID, port)
	if errors.Is(err, plugins.ErrUnsupported) {
		return nil, fmt.Errorf("job %s: the backend %s cannot open a connection to a job's port", job.ID, name)
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: port %d on backend %s: %w", job.ID, port, name, err)
	}
	return conn, nil
}

// serviceGang reports whether gang g is a service's replica: the backend
// then publishes its ports as a service (Gang.Service: a Kubernetes
// Service object).
func (s *dispatcher) serviceGang(g backendGang) bool {
	if len(g.jobs) == 0 {
		return false
	}
	run, err := s.store.Runs().Get(g.jobs[0].Run)
	if err != nil {
		return false
	}
	rs, err := s.runSpec(run)
	return err == nil && rs.Type == api.KindService
}

// withSpecPorts gives a backend job's status the container ports of its
// spec when the backend reports none: they have no host side (Host 0),
// and are reached through the backend's DialPort, as the gateway's
// replicaPort expects of a published port.
func (s *dispatcher) withSpecPorts(m store.Record, st *api.JobStatus) {
	if len(st.Ports) > 0 {
		return
	}
	js, err := s.jobSpec(m)
	if err != nil {
		return
	}
	for _, p := range js.Spec.Ports {
		st.Ports = append(st.Ports, api.JobPort{Container: p.Container})
	}
}
