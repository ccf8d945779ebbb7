package plugins

import (
	"context"
	"time"

	"gpud.dev/gpud/api"
)

// ProtocolVersion is the version of the backend protocol that this build
// speaks over go-plugin. A plugin that speaks another is refused at the
// handshake, naming both versions.
const ProtocolVersion = 1

// Backend is what the server asks of a backend: the one interface that
// built-in backends (run as `gpud plugin serve NAME` subprocesses) and
// external plugins serve over go-plugin, and that the server's side of
// the protocol implements again, so the server holds a Backend whatever
// process runs it.
//
// A backend runs work in one of two ways, and says which in Info:
//   - job backends (Kubernetes, Slurm) run gpud's jobs themselves, as pods
//     or batch jobs: StartGang, Status, Stop, Logs;
//   - instance backends (clouds) create machines that boot `gpud agent`
//     and join a fleet; the server then runs jobs there through the agent:
//     CreateInstance, TerminateInstance.
//
// The methods a backend does not support answer ErrUnsupported. Every
// method is idempotent on its ids: the server retries after a plugin
// restart without knowing whether the first call landed.
type Backend interface {
	// Info names the backend and what it supports.
	Info(ctx context.Context) (Info, error)
	// Check validates the backend's configuration and credentials with
	// the engine or cloud (a kubeconfig that reaches its API server), so
	// a bad configuration fails at `gpud backend add`, not at a run.
	Check(ctx context.Context) error
	// Offers lists the capacity the backend can give now, with prices.
	Offers(ctx context.Context, q OfferQuery) ([]api.Offer, error)

	// StartGang starts the jobs of one gang all-or-nothing (a multi-node
	// task's nodes, or one job); a gang id already started is a no-op.
	StartGang(ctx context.Context, g Gang) error
	// Status reports the jobs the backend runs for gang (all its jobs,
	// also finished ones it still knows).
	Status(ctx context.Context, gang string) ([]api.JobStatus, error)
	// List reports every gang the backend runs for this server, so a
	// restarted server or plugin re-reads its work (nothing lost).
	List(ctx context.Context) ([]string, error)
	// Stop stops a gang's jobs (SIGTERM, then after grace a kill) and
	// deletes what the backend created for it (pods, services).
	Stop(ctx context.Context, gang string, grace time.Duration) error
	// Logs streams a job's output from offset entries on; follow waits
	// for more until the job ends or ctx does.
	Logs(ctx context.Context, job string, follow bool, emit func(api.JobLogEntry) error) error

	// CreateInstance provisions a machine that boots `gpud agent` with
	// the registration settings in req; TerminateInstance removes it.
	CreateInstance(ctx context.Context, req InstanceRequest) (Instance, error)
	TerminateInstance(ctx context.Context, id string) error

	// CreateVolume makes (or, with an existing id, registers) a network
	// volume; DeleteVolume removes it.
	CreateVolume(ctx context.Context, v api.VolumeSpec) (Volume, error)
	DeleteVolume(ctx context.Context, id string) error
}

// Info describes a backend.
type Info struct {
	// Type is the backend type: kubernetes, slurm, aws, ...
	Type string `json:"type"`
	// Protocol is the backend protocol version it speaks.
	Protocol int `json:"protocol"`
	// Jobs: the backend runs jobs itself (StartGang...); Instances: it
	// creates machines that run agents; Volumes: network volumes.
	Jobs      bool `json:"jobs"`
	Instances bool `json:"instances"`
	Volumes   bool `json:"volumes"`
	// Version is the plugin's own version, for `gpud backend list`.
	Version string `json:"version,omitempty"`
	// Features are the job fields a job backend honours beyond what every
	// one does (the Feature* constants): the server keeps a run that sets
	// another field off the backend. The list is additive within one
	// protocol version: an older plugin sends none, and honours none.
	Features []string `json:"features,omitempty"`
	// NoImage: the backend runs a job's commands on its nodes without a
	// container (Slurm), so a job's image is not honoured: the server
	// refuses runs that set one there and sends no default image. False,
	// what every older plugin sends, means images run (FeatureImage).
	NoImage bool `json:"no_image,omitempty"`
}

// The features a job backend may advertise in Info.Features.
const (
	// FeaturePrivileged: privileged jobs (JobSpec.Privileged).
	FeaturePrivileged = "privileged"
	// FeatureShmSize: a sized /dev/shm (JobSpec.ShmSize).
	FeatureShmSize = "shm_size"
	// FeaturePorts: a job's ports are published and reachable (DialPort).
	FeaturePorts = "ports"
	// FeatureService: a service's replicas run there, published as a
	// service (Gang.Service) and reached through DialPort.
	FeatureService = "service"
	// FeatureVolumes: instance volumes (host paths) are mounted.
	FeatureVolumes = "volumes"
	// FeatureImage: the job runs in its image. Unlike the others it is
	// implied: every backend honours it unless its Info sets NoImage.
	FeatureImage = "image"
)

// Supports reports whether the backend advertises feature f.
func (i Info) Supports(f string) bool {
	if f == FeatureImage {
		return !i.NoImage
	}
	for _, x := range i.Features {
		if x == f {
			return true
		}
	}
	return false
}

// OfferQuery narrows offers; the zero value asks for all.
type OfferQuery struct {
	GPUName string `json:"gpu_name,omitempty"`
	GPUs    int    `json:"gpus,omitempty"`
	Spot    *bool  `json:"spot,omitempty"`
	Region  string `json:"region,omitempty"`
}

// Gang is a set of jobs started together (all or none).
type Gang struct {
	// ID names the gang within the server (the run's id and attempt).
	ID      string `json:"id"`
	Project string `json:"project"`
	Queue   string `json:"queue,omitempty"`
	// Jobs are the gang's jobs in node-rank order; their Cluster field
	// carries the multi-node environment.
	Jobs []api.JobSpec `json:"jobs"`
	// Service asks the backend to publish the jobs' ports as a service
	// (a Kubernetes Service object) named after the gang.
	Service bool `json:"service,omitempty"`
}

// InstanceRequest asks an instance backend for a machine.
type InstanceRequest struct {
	ID string `json:"id"`
	// Project is the project whose fleet the machine joins (tags, names).
	Project string    `json:"project,omitempty"`
	Offer   api.Offer `json:"offer"`
	Spot    bool      `json:"spot,omitempty"`
	// Reservation names a capacity reservation of the cloud to launch
	// into (a fleet's reservation; EC2: cr-...).
	Reservation string                `json:"reservation,omitempty"`
	Register    RegistrationSettings  `json:"register"`
	Resources   api.InstanceResources `json:"resources"`
}

// RegistrationSettings are what a new machine's `gpud agent --server`
// needs to join its fleet; the token is secret.
type RegistrationSettings struct {
	ServerURL string `json:"server_url"`
	Token     string `json:"token"`
	CAPEM     string `json:"ca_pem,omitempty"`
	Fleet     string `json:"fleet"`
}

// Instance is a machine an instance backend made.
type Instance struct {
	ID       string  `json:"id"`
	Region   string  `json:"region,omitempty"`
	Address  string  `json:"address,omitempty"`
	Price    float64 `json:"price"`
	State    string  `json:"state"`
	Hostname string  `json:"hostname,omitempty"`
	// RequestID is the InstanceRequest.ID the machine was made for;
	// Type its instance type, Spot whether it is a spot instance.
	RequestID string `json:"request_id,omitempty"`
	Type      string `json:"type,omitempty"`
	Spot      bool   `json:"spot,omitempty"`
	// Reason says why the machine is in its state, as the cloud says it
	// ("Server.SpotInstanceTermination: ..."); Interrupted is set when
	// the cloud took it back (a spot interruption), so its runs retry
	// with the interruption event.
	Reason      string `json:"reason,omitempty"`
	Interrupted bool   `json:"interrupted,omitempty"`
}

// Volume is a network volume a backend made or registered.
type Volume struct {
	ID     string   `json:"id"`
	Size   api.Size `json:"size,omitempty"`
	Region string   `json:"region,omitempty"`
	State  string   `json:"state"`
}

// ErrUnsupported is what a backend answers for a method outside what its
// Info says it supports.
var ErrUnsupported = errUnsupported{}

type errUnsupported struct{}

func (errUnsupported) Error() string { return "not supported by this backend" }
