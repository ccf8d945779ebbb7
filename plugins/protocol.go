package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"

	"gpud.dev/gpud/api"
)

// The backend protocol over go-plugin.
//
// The transport is gRPC, as go-plugin's; the messages are the Go structs of
// backend.go (and api's wire types) encoded as JSON by a gRPC codec
// registered under codecName, and the service is described by hand in
// backendServiceDesc. There is no protoc on the machines that build gpud,
// and generated protobuf code would duplicate every type the interface
// already defines (api.Offer, api.JobSpec...), to be kept in step by hand;
// JSON keeps one definition of each message, the same one the HTTP API
// speaks. Changing a message incompatibly means a new ProtocolVersion.

// codecName is the gRPC content subtype of the backend protocol's messages
// (application/grpc+gpud-json).
const codecName = "gpud-json"

// serviceName is the gRPC service of the Backend interface.
const serviceName = "gpud.backend.v1.Backend"

// pluginName is the one plugin a backend executable serves in its
// go-plugin plugin set.
const pluginName = "backend"

// Handshake is what the server and a backend plugin agree on before
// anything else: the protocol version (ProtocolVersion) and a magic cookie,
// which only says the executable was started as a gpud backend plugin (run
// by hand, it prints how it is meant to be used); it is not a secret.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "GPUD_BACKEND_PLUGIN",
	MagicCookieValue: "6f1c3b0e-gpud-backend-plugin",
}

func init() {
	// gRPC finds a codec by the content subtype of each call: both ends of
	// the protocol (the server and a plugin) link this package.
	encoding.RegisterCodec(jsonCodec{})
}

// jsonCodec encodes the protocol's messages as JSON.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)   { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
func (jsonCodec) Name() string                    { return codecName }
func callCodec() grpc.CallOption                  { return grpc.CallContentSubtype(codecName) }
func fullMethod(name string) string               { return "/" + serviceName + "/" + name }
func methodInfo(srv any, name string) *grpc.UnaryServerInfo {
	return &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod(name)}
}

// The protocol's messages beyond backend.go's types.
type (
	empty            struct{}
	configureRequest struct {
		// Config is the backend's configuration, credentials included: it
		// travels over the plugin's private gRPC connection, never in argv
		// or the environment, which child processes and ps can read.
		Config json.RawMessage `json:"config"`
	}
	offersResponse struct {
		Offers []api.Offer `json:"offers"`
	}
	gangRequest struct {
		Gang string `json:"gang"`
	}
	statusResponse struct {
		Jobs []api.JobStatus `json:"jobs"`
	}
	listResponse struct {
		Gangs []string `json:"gangs"`
	}
	stopRequest struct {
		Gang  string        `json:"gang"`
		Grace time.Duration `json:"grace"`
	}
	logsRequest struct {
		Job    string `json:"job"`
		Follow bool   `json:"follow"`
	}
	idRequest struct {
		ID string `json:"id"`
	}
)

// toStatus turns a backend's error into a gRPC status the client maps back:
// ErrUnsupported stays itself, a context's end stays one.
func toStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrUnsupported):
		return status.Error(codes.Unimplemented, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unknown, err.Error())
}

// fromStatus is toStatus's inverse on the server's side.
func fromStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.Unimplemented:
		return ErrUnsupported
	case codes.Canceled, codes.DeadlineExceeded:
		if ctx.Err() != nil {
			return ctx.Err()
		}
	case codes.Unavailable:
		return fmt.Errorf("%w: %s", ErrPluginUnavailable, st.Message())
	}
	return errors.New(st.Message())
}

// ErrPluginUnavailable is what a call answers when the plugin's process is
// gone (crashed or being restarted); the supervisor restarts it, and as
// every Backend method is idempotent the caller may retry.
var ErrPluginUnavailable = errors.New("backend plugin unavailable")

// unary describes one unary method whose handler decodes Req and calls fn
// on the server's backendServer.
func unary[Req any, Resp any](name string, fn func(*backendServer, context.Context, *Req) (*Resp, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			req := new(Req)
			if err := dec(req); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, r any) (any, error) {
				resp, err := fn(srv.(*backendServer), ctx, r.(*Req))
				return resp, toStatus(err)
			}
			if icpt == nil {
				return call(ctx, req)
			}
			return icpt(ctx, req, methodInfo(srv, name), call)
		},
	}
}

// backendHandler is the HandlerType of backendServiceDesc (gRPC checks that
// the registered server implements it).
type backendHandler interface{ backendService() }

// backendServiceDesc is the gRPC service of the Backend interface, written
// by hand (see the top of this file).
var backendServiceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*backendHandler)(nil),
	Methods: []grpc.MethodDesc{
		unary("Configure", (*backendServer).configure),
		unary("Info", (*backendServer).info),
		unary("Check", (*backendServer).check),
		unary("Offers", (*backendServer).offers),
		unary("StartGang", (*backendServer).startGang),
		unary("Status", (*backendServer).status),
		unary("List", (*backendServer).list),
		unary("Stop", (*backendServer).stop),
		unary("CreateInstance", (*backendServer).createInstance),
		unary("TerminateInstance", (*backendServer).terminateInstance),
		unary("Instances", (*backendServer).instances), // optional: InstanceLister (instances.go)
		unary("CreateVolume", (*backendServer).createVolume),
		unary("DeleteVolume", (*backendServer).deleteVolume),
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Logs",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			var req logsRequest
			if err := stream.RecvMsg(&req); err != nil {
				return err
			}
			return toStatus(srv.(*backendServer).logs(stream, &req))
		},
	}},
	Metadata: "plugins/protocol.go",
}

// grpcPlugin is the go-plugin plugin of the backend protocol: the plugin's
// side serves Backend (set, or made by Configure with factory); the
// server's side gets a *grpcBackend.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	newServer func() *backendServer
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&backendServiceDesc, p.newServer())
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &grpcBackend{cc: cc}, nil
}

// mismatch recognizes go-plugin's error for a plugin that answered the
// handshake with another protocol version.
var mismatch = regexp.MustCompile(`incompatible API version with plugin\. Plugin version: (\d+)`)

// versionError rewrites a handshake failure caused by another protocol
// version into one that names both versions and the fix.
func versionError(name string, err error) error {
	m := mismatch.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	v, convErr := strconv.Atoi(m[1])
	if convErr != nil {
		return err
	}
	return &VersionError{Plugin: name, PluginVersion: v, ServerVersion: ProtocolVersion}
}

// VersionError refuses a plugin that speaks another protocol version.
type VersionError struct {
	Plugin                       string
	PluginVersion, ServerVersion int
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("backend plugin %s speaks backend protocol version %d, but this server speaks version %d: install a build of the plugin for protocol %d (or a gpud that speaks %d)",
		e.Plugin, e.PluginVersion, e.ServerVersion, e.ServerVersion, e.PluginVersion)
}
