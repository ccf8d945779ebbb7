package plugins

import (
	"context"
	"strings"
)

// InstanceLister is the optional part of an instance backend that reports
// the machines it made for this server, with their states: the server
// follows its fleets' machines with it (a spot interruption, a machine the
// cloud terminated, one that never booted). A backend without it answers
// ErrUnsupported through ListInstances; so does an older plugin, whose
// server answers Unimplemented.
type InstanceLister interface {
	Instances(ctx context.Context) ([]Instance, error)
}

// ListInstances asks b for its instances when it lists them.
func ListInstances(ctx context.Context, b Backend) ([]Instance, error) {
	l, ok := b.(InstanceLister)
	if !ok {
		return nil, ErrUnsupported
	}
	return l.Instances(ctx)
}

type instancesResponse struct {
	Instances []Instance `json:"instances"`
}

// Instances asks the plugin; an older plugin's Unimplemented is
// ErrUnsupported (fromStatus).
func (c *grpcBackend) Instances(ctx context.Context) ([]Instance, error) {
	var r instancesResponse
	return r.Instances, c.invoke(ctx, "Instances", &empty{}, &r)
}

func (s *backendServer) instances(ctx context.Context, _ *empty) (*instancesResponse, error) {
	return call(s, func(b Backend) (*instancesResponse, error) {
		l, err := ListInstances(ctx, b)
		return &instancesResponse{Instances: l}, err
	})
}

// Instances implements InstanceLister on the live plugin.
func (s *Supervisor) Instances(ctx context.Context) (l []Instance, err error) {
	err = s.do(ctx, func(b *grpcBackend) (err error) { l, err = b.Instances(ctx); return err })
	return l, err
}

// NoCapacity starts the message of an instance backend's CreateInstance
// error that means the cloud has no machine of that offer now (EC2's
// InsufficientInstanceCapacity, a quota): the server tries another offer
// and backs off that one. Errors cross the plugin protocol as text, so
// the mark is in the message.
const NoCapacity = "no capacity:"

// IsNoCapacity reports whether err is a no-capacity answer.
func IsNoCapacity(err error) bool {
	return err != nil && strings.Contains(err.Error(), NoCapacity)
}
