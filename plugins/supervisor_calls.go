package plugins

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin/runner"

	"gpud.dev/gpud/api"
)

type (
	hclogLogger  = hclog.Logger
	runnerRunner = runner.Runner
)

// The Supervisor's Backend methods: each goes to the live plugin (do).

func (s *Supervisor) Info(ctx context.Context) (i Info, err error) {
	err = s.do(ctx, func(b *grpcBackend) (err error) { i, err = b.Info(ctx); return err })
	return i, err
}

func (s *Supervisor) Check(ctx context.Context) error {
	return s.do(ctx, func(b *grpcBackend) error { return b.Check(ctx) })
}

func (s *Supervisor) Offers(ctx context.Context, q OfferQuery) (o []api.Offer, err error) {
	err = s.do(ctx, func(b *grpcBackend) (err error) { o, err = b.Offers(ctx, q); return err })
	return o, err
}

func (s *Supervisor) StartGang(ctx context.Context, g Gang) error {
	return s.do(ctx, func(b *grpcBackend) error { return b.StartGang(ctx, g) })
}

func (s *Supervisor) Status(ctx context.Context, gang string) (j []api.JobStatus, err error) {
	err = s.do(ctx, func(b *grpcBackend) (err error) { j, err = b.Status(ctx, gang); return err })
	return j, err
}

func (s *Supervisor) List(ctx context.Context) (g []string, err error) {
	err = s.do(ctx, func(b *grpcBackend) (err error) { g, err = b.List(ctx); return err })
	return g, err
}

func (s *Supervisor) Stop(ctx context.Context, gang string, grace time.Duration) error {
	return s.do(ctx, func(b *grpcBackend) error { return b.Stop(ctx, gang, grace) })
}

// Logs is not retried after a crash (entries already emitted would be
// emitted twice): the caller sees ErrPluginUnavailable and asks again.
func (s *Supervisor) Logs(ctx context.Context, job string, follow bool, emit func(api.JobLogEntry) error) error {
	b, err := s.live(ctx)
	if err != nil {
		return err
	}
	return b.Logs(ctx, job, follow, emit)
}

func (s *Supervisor) CreateInstance(ctx context.Context, req InstanceRequest) (i Instance, err error) {
	err = s.do(ctx, func(b *grpcBackend) (err error) { i, err = b.CreateInstance(ctx, req); return err })
	return i, err
}

func (s *Supervisor) TerminateInstance(ctx context.Context, id string) error {
	return s.do(ctx, func(b *grpcBackend) error { return b.TerminateInstance(ctx, id) })
}

func (s *Supervisor) CreateVolume(ctx context.Context, v api.VolumeSpec) (vol Volume, err error) {
	err = s.do(ctx, func(b *grpcBackend) (err error) { vol, err = b.CreateVolume(ctx, v); return err })
	return vol, err
}

func (s *Supervisor) DeleteVolume(ctx context.Context, id string) error {
	return s.do(ctx, func(b *grpcBackend) error { return b.DeleteVolume(ctx, id) })
}
