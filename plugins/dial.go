package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"google.golang.org/grpc"
)

// PortDialer is the optional part of Backend that opens a byte stream to
// a port a job listens on (its container port), wherever the backend's
// engine runs it: the gateway reaches a service's replicas, and probes
// them, through it. It is additive within protocol version 1: a backend
// without it (or whose plugin predates it) answers ErrUnsupported, and
// advertises neither FeaturePorts nor FeatureService. The Supervisor
// always has it and passes the call on.
type PortDialer interface {
	DialPort(ctx context.Context, job string, port int) (net.Conn, error)
}

// DialPort opens a connection to port of job through b, or answers
// ErrUnsupported when b cannot.
func DialPort(ctx context.Context, b Backend, job string, port int) (net.Conn, error) {
	d, ok := b.(PortDialer)
	if !ok {
		return nil, ErrUnsupported
	}
	return d.DialPort(ctx, job, port)
}

// The DialPort stream: the server sends a dialRequest, the plugin dials
// and answers an empty chunk (or ends the stream with the dial's error),
// then both send chunks of the connection's bytes until either side
// closes: the server's CloseSend is the caller's Close, the plugin's end
// of the stream is the job's side closing.
type (
	dialRequest struct {
		Job  string `json:"job"`
		Port int    `json:"port"`
	}
	chunk struct {
		Data []byte `json:"data,omitempty"`
	}
)

// dialStreamDesc is the DialPort method of backendServiceDesc.
var dialStreamDesc = grpc.StreamDesc{
	StreamName:    "DialPort",
	ServerStreams: true,
	ClientStreams: true,
	Handler: func(srv any, stream grpc.ServerStream) error {
		var req dialRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		return toStatus(srv.(*backendServer).dialPort(stream, &req))
	},
}

func init() {
	backendServiceDesc.Streams = append(backendServiceDesc.Streams, dialStreamDesc)
}

// dialPort is the plugin's side: it dials through its backend and copies
// bytes both ways until either side is done.
func (s *backendServer) dialPort(stream grpc.ServerStream, r *dialRequest) error {
	b, err := s.get()
	if err != nil {
		return err
	}
	conn, err := DialPort(stream.Context(), b, r.Job, r.Port)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := stream.SendMsg(&chunk{}); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		// The server's bytes to the job; its CloseSend half-closes.
		defer close(done)
		for {
			var c chunk
			if err := stream.RecvMsg(&c); err != nil {
				if cw, ok := conn.(interface{ CloseWrite() error }); ok && errors.Is(err, io.EOF) {
					_ = cw.CloseWrite()
					return
				}
				_ = conn.Close()
				return
			}
			if _, err := conn.Write(c.Data); err != nil {
				_ = conn.Close()
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, rerr := conn.Read(buf)
		if n > 0 {
			if err := stream.SendMsg(&chunk{Data: buf[:n]}); err != nil {
				return err
			}
		}
		if rerr != nil {
			// The job's side is done: ending the stream tells the server.
			return nil
		}
	}
}

// DialPort is the server's side over go-plugin: a stream whose bytes are
// a net.Conn's (one end of a pipe the caller holds).
func (c *grpcBackend) DialPort(ctx context.Context, job string, port int) (net.Conn, error) {
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := c.cc.NewStream(sctx, &dialStreamDesc, fullMethod(dialStreamDesc.StreamName), callCodec())
	if err != nil {
		cancel()
		return nil, fromStatus(ctx, err)
	}
	fail := func(err error) (net.Conn, error) {
		cancel()
		return nil, fromStatus(ctx, err)
	}
	if err := stream.SendMsg(&dialRequest{Job: job, Port: port}); err != nil {
		return fail(err)
	}
	// The plugin's answer (an empty chunk) says the dial is made; ctx
	// bounds the wait for it only.
	answered := make(chan error, 1)
	go func() { var c chunk; answered <- stream.RecvMsg(&c) }()
	select {
	case err := <-answered:
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("backend plugin ended the dial of job %s port %d", job, port)
			}
			return fail(err)
		}
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	mine, theirs := net.Pipe()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); _ = theirs.Close() }) }
	go func() {
		// The job's bytes to the caller.
		defer stop()
		for {
			var c chunk
			if err := stream.RecvMsg(&c); err != nil {
				return
			}
			if _, err := theirs.Write(c.Data); err != nil {
				return
			}
		}
	}()
	go func() {
		// The caller's bytes to the job; its Close ends the stream.
		buf := make([]byte, 32<<10)
		for {
			n, err := theirs.Read(buf)
			if n > 0 {
				if serr := stream.SendMsg(&chunk{Data: append([]byte(nil), buf[:n]...)}); serr != nil {
					stop()
					return
				}
			}
			if err != nil {
				stop() // the caller closed its end (a pipe has no half-close)
				return
			}
		}
	}()
	return mine, nil
}

// DialPort goes to the live plugin; it is not retried (a connection is
// not idempotent): the caller sees ErrPluginUnavailable and dials again.
func (s *Supervisor) DialPort(ctx context.Context, job string, port int) (net.Conn, error) {
	b, err := s.live(ctx)
	if err != nil {
		return nil, err
	}
	return b.DialPort(ctx, job, port)
}
