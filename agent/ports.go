package agent

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"gpud.dev/gpud/api"
)

// DialPublishedPort connects to the host side of the port job id
// publishes for containerPort, on this host: the address the runtime bound
// (127.0.0.1 when it bound every address), never another. The port must
// be one of the job's published TCP ports (its spec's, as the runtime
// reported them); any other, or a job that is not running, is ErrInvalid,
// an unknown job ErrNotFound. The gateway reaches a service replica on
// any host through it (the agent's port relay).
func (a *Agent) DialPublishedPort(ctx context.Context, id string, containerPort int) (net.Conn, error) {
	addr, err := a.publishedAddr(id, containerPort)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("job %s: port %d: %w", id, containerPort, err)
	}
	return conn, nil
}

// publishedAddr is the host address job id's containerPort is published
// at.
func (a *Agent) publishedAddr(id string, containerPort int) (string, error) {
	j, err := a.get(id)
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if j.rec.Status.State != api.JobRunning {
		return "", fmt.Errorf("job %s is %s, not running: %w", id, j.rec.Status.State, ErrInvalid)
	}
	tcp := func(p api.JobPort) bool {
		return p.Container == containerPort && (p.Protocol == "" || strings.EqualFold(p.Protocol, "tcp"))
	}
	// The ports the runtime bound (a port the engine picked is known only
	// there); an adopted job without its record has only these.
	for _, p := range j.rec.Status.Ports {
		if tcp(p) && p.Host > 0 {
			return net.JoinHostPort(loopbackFor(p.HostIP), strconv.Itoa(p.Host)), nil
		}
	}
	// A job on the host's network listens on the host at its own port.
	for _, p := range j.rec.Spec.Ports {
		if tcp(p) && j.rec.Spec.HostNetwork {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Container)), nil
		}
	}
	return "", fmt.Errorf("job %s publishes no TCP port %d: %w", id, containerPort, ErrInvalid)
}

// loopbackFor is the address to dial a port bound at ip: ip itself, or the
// loopback of its family for an unspecified (every-address) binding.
func loopbackFor(ip string) string {
	switch ip {
	case "", "0.0.0.0":
		return "127.0.0.1"
	case "::":
		return "::1"
	}
	return ip
}
