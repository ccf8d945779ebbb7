package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"gpud.dev/gpud/api"
)

// Factory makes a backend from its configuration (the type-specific fields
// of a `backends:` entry, as JSON; credentials included) and the logger its
// process writes to, which reaches the server's log under the backend's
// name. It validates the configuration's shape (naming the field); Check
// then validates it against the engine.
type Factory func(config json.RawMessage, log zerolog.Logger) (Backend, error)

// ServeConfig is what a backend executable serves.
type ServeConfig struct {
	// Type names the backend type (kubernetes, ...), for logs.
	Type string
	// New makes the backend once the server sends its configuration.
	New Factory
	// Protocol overrides ProtocolVersion; only tests set it, to build a
	// plugin that the server must refuse.
	Protocol int
}

// Serve serves a backend over go-plugin on this process's standard streams
// and returns when the server closes the plugin. Run by hand (not by a gpud
// server), it returns an error saying so. Logs go to stderr as hclog JSON,
// which the server's side re-logs under the plugin's name.
func Serve(cfg ServeConfig) error {
	if os.Getenv(Handshake.MagicCookieKey) != Handshake.MagicCookieValue {
		return errors.New("this is a gpud backend plugin: a gpud server starts it (gpud serve), it is not run by hand")
	}
	if cfg.New == nil {
		return fmt.Errorf("backend %s: no factory", cfg.Type)
	}
	hs := Handshake
	if cfg.Protocol != 0 {
		hs.ProtocolVersion = uint(cfg.Protocol)
	}
	hlog := hclog.New(&hclog.LoggerOptions{Name: cfg.Type, Output: os.Stderr, JSONFormat: true, Level: hclog.Debug})
	log := zerolog.New(hclogWriter{os.Stderr}).With().Timestamp().Logger()
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: hs,
		Plugins: plugin.PluginSet{pluginName: &grpcPlugin{newServer: func() *backendServer {
			return &backendServer{factory: cfg.New, log: log}
		}}},
		GRPCServer: plugin.DefaultGRPCServer,
		Logger:     hlog,
	})
	return nil
}

// backendServer is the plugin's side of the protocol: it makes its backend
// on Configure and answers every other call through it.
type backendServer struct {
	factory Factory
	log     zerolog.Logger

	mu      sync.Mutex
	backend Backend
}

func (*backendServer) backendService() {}

func (s *backendServer) get() (Backend, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.backend == nil {
		return nil, errors.New("backend not configured yet (the server sends Configure first)")
	}
	return s.backend, nil
}

func (s *backendServer) configure(_ context.Context, req *configureRequest) (*empty, error) {
	b, err := s.factory(req.Config, s.log)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.backend = b
	s.mu.Unlock()
	return &empty{}, nil
}

// call runs fn on the configured backend.
func call[Resp any](s *backendServer, fn func(Backend) (*Resp, error)) (*Resp, error) {
	b, err := s.get()
	if err != nil {
		return nil, err
	}
	return fn(b)
}

func (s *backendServer) info(ctx context.Context, _ *empty) (*Info, error) {
	return call(s, func(b Backend) (*Info, error) {
		i, err := b.Info(ctx)
		return &i, err
	})
}

func (s *backendServer) check(ctx context.Context, _ *empty) (*empty, error) {
	return call(s, func(b Backend) (*empty, error) { return &empty{}, b.Check(ctx) })
}

func (s *backendServer) offers(ctx context.Context, q *OfferQuery) (*offersResponse, error) {
	return call(s, func(b Backend) (*offersResponse, error) {
		o, err := b.Offers(ctx, *q)
		return &offersResponse{Offers: o}, err
	})
}

func (s *backendServer) startGang(ctx context.Context, g *Gang) (*empty, error) {
	return call(s, func(b Backend) (*empty, error) { return &empty{}, b.StartGang(ctx, *g) })
}

func (s *backendServer) status(ctx context.Context, r *gangRequest) (*statusResponse, error) {
	return call(s, func(b Backend) (*statusResponse, error) {
		j, err := b.Status(ctx, r.Gang)
		return &statusResponse{Jobs: j}, err
	})
}

func (s *backendServer) list(ctx context.Context, _ *empty) (*listResponse, error) {
	return call(s, func(b Backend) (*listResponse, error) {
		g, err := b.List(ctx)
		return &listResponse{Gangs: g}, err
	})
}

func (s *backendServer) stop(ctx context.Context, r *stopRequest) (*empty, error) {
	return call(s, func(b Backend) (*empty, error) { return &empty{}, b.Stop(ctx, r.Gang, r.Grace) })
}

func (s *backendServer) createInstance(ctx context.Context, r *InstanceRequest) (*Instance, error) {
	return call(s, func(b Backend) (*Instance, error) {
		i, err := b.CreateInstance(ctx, *r)
		return &i, err
	})
}

func (s *backendServer) terminateInstance(ctx context.Context, r *idRequest) (*empty, error) {
	return call(s, func(b Backend) (*empty, error) { return &empty{}, b.TerminateInstance(ctx, r.ID) })
}

func (s *backendServer) createVolume(ctx context.Context, r *api.VolumeSpec) (*Volume, error) {
	return call(s, func(b Backend) (*Volume, error) {
		v, err := b.CreateVolume(ctx, *r)
		return &v, err
	})
}

func (s *backendServer) deleteVolume(ctx context.Context, r *idRequest) (*empty, error) {
	return call(s, func(b Backend) (*empty, error) { return &empty{}, b.DeleteVolume(ctx, r.ID) })
}

// logs streams a job's log entries, one message each.
func (s *backendServer) logs(stream grpc.ServerStream, r *logsRequest) error {
	b, err := s.get()
	if err != nil {
		return err
	}
	return b.Logs(stream.Context(), r.Job, r.Follow, func(e api.JobLogEntry) error { return stream.SendMsg(&e) })
}
