package plugins

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"

	"gpud.dev/gpud/api"
)

// grpcBackend is the server's side of the protocol: a Backend whose every
// call goes to the plugin process over its gRPC connection.
type grpcBackend struct {
	cc *grpc.ClientConn
}

var _ Backend = (*grpcBackend)(nil)

func (c *grpcBackend) invoke(ctx context.Context, method string, req, resp any) error {
	return fromStatus(ctx, c.cc.Invoke(ctx, fullMethod(method), req, resp, callCodec()))
}

// configure sends the backend's configuration: the plugin makes its
// backend from it (Factory).
func (c *grpcBackend) configure(ctx context.Context, config []byte) error {
	return c.invoke(ctx, "Configure", &configureRequest{Config: config}, &empty{})
}

func (c *grpcBackend) Info(ctx context.Context) (Info, error) {
	var i Info
	return i, c.invoke(ctx, "Info", &empty{}, &i)
}

func (c *grpcBackend) Check(ctx context.Context) error {
	return c.invoke(ctx, "Check", &empty{}, &empty{})
}

func (c *grpcBackend) Offers(ctx context.Context, q OfferQuery) ([]api.Offer, error) {
	var r offersResponse
	err := c.invoke(ctx, "Offers", &q, &r)
	return r.Offers, err
}

func (c *grpcBackend) StartGang(ctx context.Context, g Gang) error {
	return c.invoke(ctx, "StartGang", &g, &empty{})
}

func (c *grpcBackend) Status(ctx context.Context, gang string) ([]api.JobStatus, error) {
	var r statusResponse
	err := c.invoke(ctx, "Status", &gangRequest{Gang: gang}, &r)
	return r.Jobs, err
}

func (c *grpcBackend) List(ctx context.Context) ([]string, error) {
	var r listResponse
	err := c.invoke(ctx, "List", &empty{}, &r)
	return r.Gangs, err
}

func (c *grpcBackend) Stop(ctx context.Context, gang string, grace time.Duration) error {
	return c.invoke(ctx, "Stop", &stopRequest{Gang: gang, Grace: grace}, &empty{})
}

// Logs reads the plugin's server stream, one entry a message, until the
// plugin ends it (io.EOF: the job's output is all sent) or ctx ends.
func (c *grpcBackend) Logs(ctx context.Context, job string, follow bool, emit func(api.JobLogEntry) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	desc := &backendServiceDesc.Streams[0]
	stream, err := c.cc.NewStream(ctx, desc, fullMethod(desc.StreamName), callCodec())
	if err != nil {
		return fromStatus(ctx, err)
	}
	if err := stream.SendMsg(&logsRequest{Job: job, Follow: follow}); err != nil {
		return fromStatus(ctx, err)
	}
	if err := stream.CloseSend(); err != nil {
		return fromStatus(ctx, err)
	}
	for {
		var e api.JobLogEntry
		err := stream.RecvMsg(&e)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fromStatus(ctx, err)
		}
		if err := emit(e); err != nil {
			return err
		}
	}
}

func (c *grpcBackend) CreateInstance(ctx context.Context, req InstanceRequest) (Instance, error) {
	var i Instance
	return i, c.invoke(ctx, "CreateInstance", &req, &i)
}

func (c *grpcBackend) TerminateInstance(ctx context.Context, id string) error {
	return c.invoke(ctx, "TerminateInstance", &idRequest{ID: id}, &empty{})
}

func (c *grpcBackend) CreateVolume(ctx context.Context, v api.VolumeSpec) (Volume, error) {
	var vol Volume
	return vol, c.invoke(ctx, "CreateVolume", &v, &vol)
}

func (c *grpcBackend) DeleteVolume(ctx context.Context, id string) error {
	return c.invoke(ctx, "DeleteVolume", &idRequest{ID: id}, &empty{})
}
