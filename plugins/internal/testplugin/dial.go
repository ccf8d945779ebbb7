package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
)

// DialPort implements plugins.PortDialer: a job of this engine is a
// process of this machine, so its port is a loopback port. Only a job of
// a gang the engine runs is dialed (not any port of the machine).
func (b *backend) DialPort(ctx context.Context, job string, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("job %s: no port %d", job, port)
	}
	gangs, err := b.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, id := range gangs {
		g, err := b.readGang(id)
		if err != nil || g == nil {
			continue
		}
		if slices.ContainsFunc(g.Jobs, func(j gangJob) bool { return j.ID == job }) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		}
	}
	return nil, fmt.Errorf("test backend: no job %s", job)
}
