package proxy

import (
	"context"
	"net"
	"net/http"

	"gpud.dev/gpud/api"
)

// Service is what the gateway knows of one published service: a snapshot
// the Resolver builds from the store. A new snapshot replaces the old one
// whole; the gateway never edits it.
type Service struct {
	Project string
	Run     string
	// Hosts are the hostnames that reach the service (<run>.<domain> and
	// custom domains), lower case, no port.
	Hosts []string
	// Auth true asks the Resolver to authorize each request.
	Auth bool
	// StripPrefix removes /proxy/services/<project>/<run> from the path
	// the replica sees (path routing only).
	StripPrefix bool
	RateLimits  []api.RateLimit
	// Model is the model the service serves on the OpenAI-compatible
	// routes, nil when none.
	Model *api.Model
	// Replicas are the replicas that may take requests (started and, when
	// the service has probes, ready).
	Replicas []Replica
	// MinReplicas is 0 for a service that scales to zero: with no
	// replica, a request waits (Resolver.WaitReplica) instead of failing.
	MinReplicas int
	// Status is the run's status (running, provisioning, ...), for the
	// 503 a request gets when the service has no ready replica.
	Status string
}

// Key names a service within the server.
func (s *Service) Key() string { return s.Project + "/" + s.Run }

// Replica is one replica that can take requests.
type Replica struct {
	// ID is the job's id; it keys the replica's connection pool.
	ID string
	// Addr is host:port where the gateway reaches the replica directly,
	// used when Dial is nil.
	Addr string
	// Dial opens a connection to the replica's port some other way (the
	// agent's link, for a host the gateway cannot reach); nil: net.Dial
	// to Addr.
	Dial func(ctx context.Context) (net.Conn, error)
}

// Resolver is the server's side of the gateway.
type Resolver interface {
	// ServiceByHost finds the service that a request's host (lower case,
	// no port) reaches; ok false for a host the server does not know.
	ServiceByHost(host string) (svc *Service, ok bool)
	// Service finds project's service run; ok false when there is no
	// such active service.
	Service(project, run string) (svc *Service, ok bool)
	// Models lists project's services that declare a model.
	Models(project string) []*Service
	// Authorize checks r's credentials against svc's project (a token of
	// a member, or a service key). A nil error lets the request through.
	Authorize(r *http.Request, svc *Service) error
	// WaitReplica asks for a replica of a service that has none (scale
	// from zero) and waits, until ctx ends, for one to take requests.
	WaitReplica(ctx context.Context, svc *Service) (*Service, error)
}
